// The load side of the end-to-end benchmarks (scripts/bench.sh sections produce, e2e,
// latency, failover, rss): a producer that inserts events with plain prepared SQL as
// any client would, and a probe of the database's round-trip and commit costs.
//
//   dsync_load_bench produce --db URL --count N [--rows-per-statement K] [--connections C]
//                            [--rate R] [--tick-ms T] [--wake-dispatcher SERVICE] [--topic T]
//                            [--prefix P] [--payload JSON]
//   dsync_load_bench produce-api --api http://HOST:PORT --count N [--rows-per-statement K]
//                            [--connections C] [--topic T] [--prefix P] [--payload JSON]
//   dsync_load_bench probe   --db URL [--count N]
//   dsync_load_bench ceiling --db URL [--events N] [--threads T] [--batch B] [--steps K]
//                            [--tx-per-batch [--exact]] [--prefix P]
//
// produce: inserts N events (tenant `bench`, code `<prefix>-<i>`, data_id `d-<i>`, the
//   topic, the payload) with the plain producer statement (README.md "Using it")
//     INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES (...), ...
//   K rows per statement [1: single INSERTs], each statement autocommitted, spread over C
//   connections [1], each a thread with its own share of the codes. With --rate R
//   (events/s, one connection only) it paces itself: every T ms [10] it inserts what is
//   due by then (floor(R * elapsed) minus what it has sent, at most K rows per statement),
//   so a slow statement is caught up in the next tick. With --wake-dispatcher SERVICE it
//   then wakes that service's leading dispatcher, as `dsync produce` and the API do
//   (dispatcher/dispatcher_waker.h); without it, it is the plain-SQL producer, which
//   nothing tells the dispatcher about. Prints
//     PRODUCED rows=N statements=S seconds=X rate=Y max_lag_rows=L
//   (rate = rows / wall time from the first statement to the last commit).
// produce-api: the same events through `dsync serve`: POST /v1/batches with K events
//   per request (batch_code `<prefix>-b<n>`), C keep-alive HTTP connections; every
//   answer must be 201 with `created` = K. Prints the same PRODUCED line (statements =
//   requests).
// probe: on a scratch table `bench_probe` in the URL's schema (created and dropped here),
//   N [2000] times each: `SELECT 1` (a round trip), an autocommit one-row UPDATE (a round
//   trip + a durable commit: fsync at innodb_flush_log_at_trx_commit=1), and BEGIN +
//   UPDATE + COMMIT (three round trips, one commit). Prints
//     PROBE what=<name> p50_us=... p99_us=... mean_us=...
//
// ceiling: the database's own ceiling for an event's row writes (issue 6: "the
//   database's limit is the reason -- show which"). On a schema migrated by `dsync
//   migrate`, with no dsync code at all, it performs exactly the row writes a K-step
//   [1] `demo` event needs, in the most batched form: T [4] threads, each with its own
//   connection (node address 127.0.0.1:<9001 + t>), repeatedly take the next B [100]
//   events of N [20000] and run them through the stages, each stage ONE multi-row
//   statement for the whole batch:
//     1 insert   INSERT distribute_event (B rows, the producer's columns)
//                (+ SELECT LAST_INSERT_ID(): the ids, consecutive at
//                innodb_autoinc_lock_mode 0/1, which is checked)
//     2 assign   UPDATE distribute_event SET status ASSIGNED, node_address, version+1, assigned_time
//                WHERE id IN (...) AND status = 'PENDING'
//     3 claim    UPDATE ... process_log append (events/process_log.h), status RUNNING,
//                version+1, attempt+1, started_time, modifier_time
//                WHERE id IN (...) AND status = 'ASSIGNED' AND node_address = ? AND phase = 'FORWARD'
//     4 steps    INSERT IGNORE distribute_event_step (B*K rows, the engine's columns:
//                step 1 EXECUTING with node, attempt, started_at; the others PENDING)
//     5 ledger   INSERT demo_ledger (B*K rows) ON DUPLICATE KEY UPDATE applications + 1
//     6 step ok  UPDATE distribute_event_step SET status SUCCESS, executed_at, output,
//                compensation_data WHERE code IN (B*K codes)
//     7 done     UPDATE ... process_log append, status SUCCESS, version+1, finished_time,
//                modifier_time, progress 100, result WHERE id IN (...) AND status = 'RUNNING'
//   Each stage autocommitted (7 commits a batch), or with --tx-per-batch stages 4-7 in
//   one transaction, as group completion would (4 commits a batch). Every statement's
//   matched/inserted row count is checked, and at the end every event must be SUCCESS
//   with K SUCCESS steps and K ledger rows. Timing: from the first statement to the last
//   commit (connections open before). Row writes per event: 4 + 3K. This is
//   shape=minimal. Not included there (dsync logic, not an event's needed writes): the
//   dispatcher's and the consumer's reads, the per-row version fences (ELT/FIELD), and,
//   for K > 1, the engine's separate EXECUTING mark of steps 2..K.
//   --exact (needs --tx-per-batch; shape=exact): the engine's own write set, through
//   the events layer's own functions instead of this file's statements, with none of
//   the processes' reads (polls, the dispatcher's counts) around them. Per batch of B:
//     1 insert   as above
//     2 assign   events::AssignEvents (the dispatcher's statement, process_log entry
//                included), autocommitted per chunk
//     then for each step k = 1..K, one commit group (a READ COMMITTED session, as
//     saga/commit_group.cc's): BEGIN; events::ApplyStepSuccesses of the B events;
//     COMMIT. Step 1's group is the claim at commit (saga/event_run.cc): the events
//     ASSIGNED -> SUCCESS (K = 1) or RUNNING, and the plan's K rows (step 1 SUCCESS,
//     step 2 EXECUTING); later steps' groups lock the events at their version, mark
//     step k SUCCESS and step k+1 EXECUTING, and the last turns the events SUCCESS. No
//     touch of the events (no-op steps run within the touch interval). Every group
//     writes the demo handler's ledger row of each event (StepContext::InsertAtCommit).
//   Commits a batch: 1 + ceil(B / 64) + K. Row writes per event: 4K + 1 (5 for 1 step,
//   13 for 3). The steps' attempt, node and times, and the events' versions and
//   process_log entries, are checked at the end.
//   Prints
//     RESULT ceiling steps=K threads=T batch=B shape=minimal|exact events_per_s=...
//       row_writes_per_s=... statements=S statements_per_event=... tx=per_stage|per_batch
//       commits_per_event=... events=N seconds=X row_writes_per_event=4+3K|4K+1
//       handler_row_writes_per_event=... fsyncs_per_event=... client_cpu_us_per_event=...
//       stage_ms=insert:..,assign:..,claim:..,steps:..,ledger:..,step_ok:..,done:..
//   (statements = every statement sent, the id read and BEGIN/COMMIT included; for
//   exact the server's Questions over the run; handler_* and fsyncs_* are server-wide
//   status deltas over the run, for a
//   check of the row-write count on an otherwise idle server; client_cpu_* is this
//   program's CPU; stage_ms = mean ms a batch spends in each stage, minimal: the group's
//   COMMIT in `done`; exact: insert, assign and groups, the K commit groups together).
//   The UPDATEs name their index (FORCE INDEX, see CeilingSql).
//
// Errors end the program with exit code 1 and one line on stderr; bad flags exit 2.
// Thread safety: produce's threads each own one Connection; nothing else is shared.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <sys/resource.h>
#include <vector>

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/URI.h>
#include <nlohmann/json.hpp>

#include "bench/bench_main.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "dispatcher/dispatcher_waker.h"
#include "events/assign.h"
#include "events/process_log.h"
#include "events/status.h"
#include "events/transitions.h"
#include "saga/steps/demo_step.h"
#include "storage/connection.h"
#include "storage/db_url.h"

namespace dsync::bench {
namespace {

using Steady = std::chrono::steady_clock;
using storage::Connection;
using storage::Value;

struct Options {
  std::string command;
  std::string url;
  std::string api;  // produce-api: http://host:port
  int64_t count = 0;
  int rows_per_statement = 1;
  int connections = 1;
  double rate = 0;  // 0: as fast as possible
  int tick_ms = 10;
  std::string wake_service;  // --wake-dispatcher: wake this service's dispatcher each tick
  std::string topic = "E2E_1";
  std::string prefix = "ev";
  std::string payload = "{}";
  // ceiling
  int threads = 4;
  int batch = 100;
  int steps = 1;
  bool tx_per_batch = false;
  bool exact = false;
};

[[noreturn]] void Usage(const std::string& why) {
  throw UsageError(why +
                   " (usage: dsync_load_bench produce --db URL --count N [--rows-per-statement K] "
                   "[--connections C] [--rate R] [--tick-ms T] [--wake-dispatcher SERVICE] [--topic T] [--prefix P] [--payload JSON] | "
                   "probe --db URL [--count N] | "
                   "ceiling --db URL [--events N] [--threads T] [--batch B] [--steps K] [--tx-per-batch [--exact]] [--prefix P])");
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  if (argc < 2) Usage("missing command");
  o.command = argv[1];
  if (o.command != "produce" && o.command != "produce-api" && o.command != "probe" && o.command != "ceiling") {
    Usage("unknown command '" + o.command + "'");
  }
  if (o.command == "probe") o.count = 2000;
  if (o.command == "ceiling") {
    o.count = 20000;
    o.prefix = "c";
  }
  auto value = [&](int& i, const std::string& flag) -> std::string {
    if (i + 1 >= argc) Usage(flag + " needs a value");
    return argv[++i];
  };
  auto number = [&](int& i, const std::string& flag, double min) -> double {
    std::string v = value(i, flag);
    char* end = nullptr;
    double n = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || n < min) Usage(flag + ": not a number >= " + std::to_string(min) + ": " + v);
    return n;
  };
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--db") o.url = value(i, a);
    else if (a == "--api") o.api = value(i, a);
    else if (a == "--count") o.count = static_cast<int64_t>(number(i, a, 1));
    else if (a == "--rows-per-statement") o.rows_per_statement = static_cast<int>(number(i, a, 1));
    else if (a == "--connections") o.connections = static_cast<int>(number(i, a, 1));
    else if (a == "--rate") o.rate = number(i, a, 0);
    else if (a == "--tick-ms") o.tick_ms = static_cast<int>(number(i, a, 1));
    else if (a == "--wake-dispatcher") o.wake_service = value(i, a);
    else if (a == "--topic") o.topic = value(i, a);
    else if (a == "--prefix") o.prefix = value(i, a);
    else if (a == "--payload") o.payload = value(i, a);
    else if (a == "--events" && o.command == "ceiling") o.count = static_cast<int64_t>(number(i, a, 1));
    else if (a == "--threads") o.threads = static_cast<int>(number(i, a, 1));
    else if (a == "--batch") o.batch = static_cast<int>(number(i, a, 1));
    else if (a == "--steps") o.steps = static_cast<int>(number(i, a, 1));
    else if (a == "--tx-per-batch") o.tx_per_batch = true;
    else if (a == "--exact" && o.command == "ceiling") o.exact = true;
    else Usage("unknown flag " + a);
  }
  if (o.command == "produce-api" ? o.api.empty() : o.url.empty()) Usage("--db (or --api) is required");
  if (o.command != "probe" && o.count == 0) Usage("--count is required");
  if (o.rate > 0 && o.connections != 1) Usage("--rate works with one connection");
  if (!o.wake_service.empty() && (o.command != "produce" || o.rate <= 0)) {
    Usage("--wake-dispatcher works with produce --rate");
  }
  // A prepared statement takes at most 65,535 placeholders; the step INSERT binds 13 a row.
  if (o.command == "ceiling" && static_cast<int64_t>(o.batch) * o.steps * 13 > 65535) {
    Usage("--batch x --steps must stay <= 5041 (13 placeholders per step row, 65,535 per statement)");
  }
  if (o.exact && !o.tx_per_batch) Usage("--exact needs --tx-per-batch (the engine's group transactions)");
  return o;
}

// "INSERT ... VALUES (?, ?, ?, ?, ?), ..." for `rows` rows.
std::string InsertSql(int rows) {
  std::string sql = "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES ";
  for (int r = 0; r < rows; ++r) sql += r == 0 ? "(?, ?, ?, ?, ?)" : ", (?, ?, ?, ?, ?)";
  return sql;
}

// Inserts events [first, first + rows) in one statement.
void InsertRows(Connection& c, const Options& o, int64_t first, int rows) {
  static thread_local std::vector<Value> values;
  values.clear();
  for (int64_t k = first; k < first + rows; ++k) {
    std::string n = std::to_string(k);
    values.emplace_back(std::string("bench"));
    values.emplace_back(o.prefix + "-" + n);
    values.emplace_back("d-" + n);
    values.emplace_back(o.topic);
    values.emplace_back(o.payload);
  }
  c.Execute(InsertSql(rows), storage::Values(values));
}

double Seconds(Steady::duration d) { return std::chrono::duration<double>(d).count(); }

// Codes [0, o.count) split into o.connections contiguous shares, one thread each,
// sent o.rows_per_statement at a time: send(thread, first, rows). The first failure
// stops every thread and is rethrown here.
void InParallel(const Options& o, const std::function<void(int, int64_t, int)>& send) {
  std::atomic<bool> failed{false};
  std::string error;
  std::mutex error_mu;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < o.connections; ++t) {
      threads.emplace_back([&, t] {
        int64_t begin = o.count * t / o.connections, end = o.count * (t + 1) / o.connections;
        try {
          for (int64_t k = begin; k < end && !failed; k += o.rows_per_statement) {
            send(t, k, static_cast<int>(std::min<int64_t>(end - k, o.rows_per_statement)));
          }
        } catch (const std::exception& e) {
          std::lock_guard lock(error_mu);
          failed = true;
          error = e.what();
        }
      });
    }
  }
  if (failed) throw std::runtime_error(error);
}

int Produce(const Options& o) {
  storage::DbUrl url = storage::DbUrl::Parse(o.url);
  std::atomic<int64_t> statements{0};
  int64_t max_lag = 0;
  Steady::time_point start;
  if (o.rate > 0) {
    Connection c(url);
    SystemClock clock;
    std::unique_ptr<storage::ConnectionPool> wake_pool;
    std::unique_ptr<dispatcher::DispatcherWaker> waker;
    if (!o.wake_service.empty()) {
      wake_pool = std::make_unique<storage::ConnectionPool>(url);
      waker = std::make_unique<dispatcher::DispatcherWaker>(*wake_pool, o.wake_service, clock);
    }
    start = Steady::now();
    int64_t sent = 0;
    auto next_tick = start;
    while (sent < o.count) {
      int64_t due = std::min<int64_t>(o.count, static_cast<int64_t>(o.rate * Seconds(Steady::now() - start)));
      max_lag = std::max(max_lag, due - sent);
      const int64_t before = sent;
      while (sent < due) {
        int rows = static_cast<int>(std::min<int64_t>(due - sent, o.rows_per_statement));
        InsertRows(c, o, sent, rows);
        sent += rows;
        ++statements;
      }
      if (waker && sent > before) waker->Wake();
      next_tick += std::chrono::milliseconds(o.tick_ms);
      std::this_thread::sleep_until(next_tick);
    }
  } else {
    // Each connection takes a contiguous share of the codes; connections open first
    // so the timing covers the inserts only.
    std::vector<std::unique_ptr<Connection>> conns;
    for (int t = 0; t < o.connections; ++t) conns.push_back(std::make_unique<Connection>(url));
    start = Steady::now();
    InParallel(o, [&](int t, int64_t first, int rows) {
      InsertRows(*conns[t], o, first, rows);
      ++statements;
    });
  }
  double secs = Seconds(Steady::now() - start);
  std::printf("PRODUCED rows=%lld statements=%lld seconds=%.3f rate=%.0f max_lag_rows=%lld\n",
              static_cast<long long>(o.count), static_cast<long long>(statements.load()), secs, o.count / secs,
              static_cast<long long>(max_lag));
  return 0;
}

// POSTs events [first, first + rows) as one batch; throws unless 201 and all created.
void PostBatch(Poco::Net::HTTPClientSession& session, const Options& o, int64_t first, int rows) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json payload = nlohmann::json::parse(o.payload);
  for (int64_t k = first; k < first + rows; ++k) {
    std::string n = std::to_string(k);
    events.push_back({{"code", o.prefix + "-" + n}, {"topic", o.topic}, {"tenant_id", "bench"},
                      {"data_id", "d-" + n}, {"payload", payload}});
  }
  std::string body =
      nlohmann::json{{"batch_code", o.prefix + "-b" + std::to_string(first)}, {"events", std::move(events)}}.dump();
  Poco::Net::HTTPRequest request(Poco::Net::HTTPRequest::HTTP_POST, "/v1/batches", Poco::Net::HTTPMessage::HTTP_1_1);
  request.setContentType("application/json");
  request.setContentLength(static_cast<std::streamsize>(body.size()));
  request.setKeepAlive(true);
  session.sendRequest(request) << body;
  Poco::Net::HTTPResponse response;
  std::istream& in = session.receiveResponse(response);
  std::string answer(std::istreambuf_iterator<char>(in), {});
  if (response.getStatus() != Poco::Net::HTTPResponse::HTTP_CREATED) {
    throw std::runtime_error("POST /v1/batches: HTTP " + std::to_string(response.getStatus()) + ": " + answer);
  }
  auto parsed = nlohmann::json::parse(answer, nullptr, false);
  if (parsed.is_discarded() || parsed.value("created", -1) != rows) {
    throw std::runtime_error("POST /v1/batches: expected created=" + std::to_string(rows) + ", got " + answer);
  }
}

int ProduceApi(const Options& o) {
  Poco::URI uri(o.api);
  std::vector<std::unique_ptr<Poco::Net::HTTPClientSession>> sessions;
  for (int t = 0; t < o.connections; ++t) {
    sessions.push_back(std::make_unique<Poco::Net::HTTPClientSession>(uri.getHost(), uri.getPort()));
    sessions.back()->setKeepAlive(true);
    sessions.back()->setTimeout(Poco::Timespan(60, 0));
  }
  std::atomic<int64_t> requests{0};
  auto start = Steady::now();
  InParallel(o, [&](int t, int64_t first, int rows) {
    PostBatch(*sessions[t], o, first, rows);
    ++requests;
  });
  double secs = Seconds(Steady::now() - start);
  std::printf("PRODUCED rows=%lld statements=%lld seconds=%.3f rate=%.0f max_lag_rows=0\n",
              static_cast<long long>(o.count), static_cast<long long>(requests.load()), secs, o.count / secs);
  return 0;
}

// Params: none. Fixed scratch DDL of the probe (trusted text, not user input).
constexpr const char* kCreateProbe =
    "CREATE TABLE IF NOT EXISTS bench_probe (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB";
constexpr const char* kDropProbe = "DROP TABLE IF EXISTS bench_probe";
// Params: none.
constexpr const char* kSeedProbe = "INSERT INTO bench_probe (id, n) VALUES (1, 0) ON DUPLICATE KEY UPDATE n = 0";
// Params: none.
constexpr const char* kBumpProbe = "UPDATE bench_probe SET n = n + 1 WHERE id = 1";
constexpr const char* kSelectOne = "SELECT 1";

template <class F>
void Measure(const char* what, int64_t count, F&& fn) {
  std::vector<double> us;
  us.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    auto t0 = Steady::now();
    fn();
    us.push_back(std::chrono::duration<double, std::micro>(Steady::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  auto pct = [&](double p) { return us[std::min(us.size() - 1, static_cast<size_t>(p * static_cast<double>(us.size())))]; };
  std::printf("PROBE what=%s p50_us=%.0f p99_us=%.0f mean_us=%.0f count=%lld\n", what, pct(0.50), pct(0.99),
              sum / static_cast<double>(us.size()), static_cast<long long>(count));
}

int Probe(const Options& o) {
  Connection c(storage::DbUrl::Parse(o.url));
  c.ExecuteDdl(kCreateProbe);
  c.Execute(kSeedProbe);
  Measure("select_1", o.count, [&] { c.QueryInt(kSelectOne); });
  Measure("autocommit_update", o.count, [&] { c.Execute(kBumpProbe); });
  Measure("begin_update_commit", o.count, [&] {
    c.Begin();
    c.Execute(kBumpProbe);
    c.Commit();
  });
  c.ExecuteDdl(kDropProbe);
  return 0;
}


// ---- ceiling ------------------------------------------------------------------------

// "?, ?, ..." with n marks.
std::string Marks(size_t n) {
  std::string m;
  m.reserve(n * 3);
  for (size_t i = 0; i < n; ++i) m += i == 0 ? "?" : ", ?";
  return m;
}

// The statements of one batch of `rows` events of `steps` steps each. Fixed texts
// (numbers of placeholders only), so each connection prepares them once per batch size.
// The UPDATEs name their index (FORCE INDEX): on a young table (the first batches)
// the optimizer may read a long IN list by a scan of the primary key instead, which
// X-locks every row it passes, other threads' rows too: serialized batches, and
// deadlocks with --tx-per-batch (seen: the step UPDATE by code). A plan accident is
// not the database's write limit, which is what this measures.
std::string StepInsertSql(size_t rows) {
  std::string sql = "INSERT IGNORE INTO distribute_event_step (code, job_code, tenant_id, sort, step_type, step_name, "
                    "max_retry, payload, status, node_address, attempt, started_at, parent_step_id) VALUES ";
  for (size_t i = 0; i < rows; ++i) {
    sql += i == 0 ? "" : ", ";
    sql += "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, IF(?, NOW(3), NULL), ?)";
  }
  return sql;
}

struct CeilingSql {
  std::string insert_events, assign, claim, insert_steps, insert_ledger, steps_ok, done;

  CeilingSql(size_t rows, size_t steps) {
    std::string ids = Marks(rows);
    insert_events = InsertSql(static_cast<int>(rows));
    // Params: node; ids.
    assign = "UPDATE distribute_event FORCE INDEX (PRIMARY) SET status = " DSYNC_SQL_STATUS(ASSIGNED) ", fair_pending = 0, node_address = ?, "
             "version = version + 1, assigned_time = NOW(3) WHERE id IN (" + ids + ") AND status = " DSYNC_SQL_STATUS(PENDING);
    // Params: node, 'RUNNING', why (log); ids; node.
    claim = "UPDATE distribute_event FORCE INDEX (PRIMARY) SET " DSYNC_APPEND_PROCESS_LOG
            ", status = " DSYNC_SQL_STATUS(RUNNING) ", version = version + 1, attempt = attempt + 1, started_time = NOW(3), "
            "modifier_time = NOW(3) WHERE id IN (" + ids + ") AND status = " DSYNC_SQL_STATUS(ASSIGNED) " AND node_address = ? "
            "AND phase = 'FORWARD'";
    // The engine's step INSERT (saga/step_store.cc InsertStepsSql), rows * steps rows.
    // Params per row: code, job_code, tenant_id, sort, step_type, step_name, max_retry,
    // payload, status, node_address, attempt, executing flag, parent_step_id.
    insert_steps = StepInsertSql(rows * steps);
    // The demo step's effect (saga/steps/demo_step.h kDemoLedgerHead/Tail), rows * steps rows.
    // Params per row: idempotency key (step code), event code, step name.
    insert_ledger = std::string(saga::kDemoLedgerHead) + " ";
    for (size_t i = 0; i < rows * steps; ++i) insert_ledger += i == 0 ? "(?, ?, ?)" : ", (?, ?, ?)";
    insert_ledger += std::string(" ") + saga::kDemoLedgerTail;
    // The engine's kMarkStepSucceeded; output and compensation_data are what the demo step
    // returns, {"ledger": <step code>}, built from the row's code instead of bound per row.
    // Params: step codes.
    steps_ok = "UPDATE distribute_event_step FORCE INDEX (uk_code) SET status = " DSYNC_SQL_STATUS(SUCCESS) ", executed_at = NOW(3), "
               "output = JSON_OBJECT('ledger', code), compensation_data = JSON_OBJECT('ledger', code) "
               "WHERE code IN (" + Marks(rows * steps) + ")";
    // The engine's kSucceedEvent. Params: node, 'SUCCESS', why (log); result; ids.
    done = "UPDATE distribute_event FORCE INDEX (PRIMARY) SET " DSYNC_APPEND_PROCESS_LOG
           ", status = " DSYNC_SQL_STATUS(SUCCESS) ", version = version + 1, finished_time = NOW(3), modifier_time = NOW(3), "
           "progress = 100, result = ? WHERE id IN (" + ids + ") AND status = " DSYNC_SQL_STATUS(RUNNING);
  }
};

constexpr int kMinimalStages = 7;
constexpr int kExactStages = 3;
constexpr int kStages = kMinimalStages;  // room for either
constexpr const char* kMinimalStageNames[kMinimalStages] = {"insert", "assign", "claim", "steps",
                                                            "ledger", "step_ok", "done"};
constexpr const char* kExactStageNames[kExactStages] = {"insert", "assign", "groups"};

// Server-wide status counters for the row-write check.
// Params: none.
constexpr const char* kCeilingStatus =
    "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN "
    "('HANDLER_WRITE', 'HANDLER_UPDATE', 'HANDLER_DELETE', 'INNODB_DATA_FSYNCS', 'QUESTIONS')";

struct ServerCounters {
  int64_t row_writes = 0;
  int64_t fsyncs = 0;
  int64_t questions = 0;  // statements of every client, this one's reads included
};

ServerCounters ReadCounters(Connection& c) {
  ServerCounters s;
  auto rs = c.Query(kCeilingStatus);
  while (rs->next()) {
    std::string name(rs->getString(1));
    int64_t v = std::stoll(std::string(rs->getString(2)));
    if (name == "INNODB_DATA_FSYNCS") s.fsyncs += v;
    else if (name == "QUESTIONS") s.questions += v;
    else s.row_writes += v;
  }
  return s;
}

void Expect(uint64_t got, uint64_t want, const char* stage) {
  if (got != want) {
    throw std::runtime_error(std::string("ceiling: stage ") + stage + " touched " + std::to_string(got) +
                             " rows, expected " + std::to_string(want));
  }
}

// One thread's work: batches of events [first, first + rows) taken from `next`.
struct CeilingWorker {
  CeilingWorker(const Options& options, Connection& conn, std::string node_address, std::atomic<int64_t>& next_event,
                std::atomic<bool>& any_failed)
      : o(options), c(conn), node(std::move(node_address)), next(next_event), failed(any_failed) {}

  const Options& o;
  Connection& c;
  std::string node;
  std::atomic<int64_t>& next;
  std::atomic<bool>& failed;
  int64_t statements = 0;
  int64_t commits = 0;
  int64_t batches = 0;
  double stage_s[kStages] = {};
  std::map<size_t, std::unique_ptr<CeilingSql>> sql;  // by batch size (the last may be short)

  const CeilingSql& Sql(size_t rows) {
    auto& s = sql[rows];
    if (!s) s = std::make_unique<CeilingSql>(rows, static_cast<size_t>(o.steps));
    return *s;
  }

  void Run() {
    if (o.exact) RunExact();
    else RunMinimal();
  }

  // Takes the next batch of events [first, first + rows) of the shared counter; false
  // when all are taken or a worker failed.
  bool TakeBatch(int64_t& first, size_t& rows) {
    if (failed) return false;
    first = next.fetch_add(o.batch);
    if (first >= o.count) return false;
    rows = static_cast<size_t>(std::min<int64_t>(o.batch, o.count - first));
    return true;
  }

  // Times the stages of one batch: Lap(s) adds the time since the previous lap (or
  // the start) to stage_s[s].
  struct Laps {
    double* stage_s;
    Steady::time_point t = Steady::now();
    void operator()(int stage) {
      auto now = Steady::now();
      stage_s[stage] += Seconds(now - t);
      t = now;
    }
  };

  // The step rows of events [first, first + rows) for the INSERT IGNORE (step 1
  // EXECUTING at attempt 1 on this node), as the engine's PlanRow + StepValues.
  void StepRows(int64_t first, size_t rows, std::vector<Value>& v, std::vector<Value>* codes) {
    const size_t k = static_cast<size_t>(o.steps);
    v.clear();
    for (size_t i = 0; i < rows; ++i) {
      std::string code = o.prefix + "-" + std::to_string(first + static_cast<int64_t>(i));
      for (size_t s = 1; s <= k; ++s) {
        std::string step_code = code + "#" + std::to_string(s);
        bool executing = s == 1;
        v.emplace_back(step_code);
        v.emplace_back(code);
        v.emplace_back(std::string("bench"));
        v.emplace_back(static_cast<int64_t>(s));
        v.emplace_back(std::string("demo"));
        v.emplace_back("s" + std::to_string(s));
        v.emplace_back(int64_t{3});
        v.emplace_back(std::string("{}"));  // the demo step's params: none
        v.emplace_back(events::ToText(executing ? events::StepStatus::kExecuting : events::StepStatus::kPending));
        if (executing) v.emplace_back(node);
        else v.emplace_back(std::monostate{});
        v.emplace_back(int64_t{executing ? 1 : 0});
        v.emplace_back(executing);
        v.emplace_back(std::monostate{});
        if (codes) codes->emplace_back(std::move(step_code));
      }
    }
  }

  // --exact: see the file comment.
  void RunExact() {
    const size_t k = static_cast<size_t>(o.steps);
    // A commit group's session (saga/commit_group.cc): READ COMMITTED, autocommit off.
    c.ExecuteDdl("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    const std::string result = nlohmann::json{{"steps", k}}.dump();
    std::vector<events::AssignRow> assign;
    std::vector<events::StepSuccess> group;
    int64_t first;
    size_t rows;
    while (TakeBatch(first, rows)) {
      Laps lap{stage_s};
      InsertRows(c, o, first, static_cast<int>(rows));
      auto first_id = c.QueryInt("SELECT LAST_INSERT_ID()");
      if (!first_id) throw std::runtime_error("ceiling: no LAST_INSERT_ID()");
      commits += 1;  // statements: the server's count (Ceiling)
      lap(0);
      // The dispatcher's assignment, autocommitted per chunk here.
      assign.clear();
      for (size_t i = 0; i < rows; ++i) assign.push_back({*first_id + static_cast<int64_t>(i), 1, node});
      const std::vector<bool> assigned = events::AssignEvents(c, assign);
      if (std::count(assigned.begin(), assigned.end(), true) != static_cast<std::ptrdiff_t>(rows)) {
        throw std::runtime_error("ceiling: assign: not every event assigned");
      }
      commits += static_cast<int64_t>((rows + events::kAssignChunkSize - 1) / events::kAssignChunkSize);
      lap(1);
      // Step s of every event: one commit group (events::ApplyStepSuccesses), the
      // first with the claim at commit and the plan's rows (saga/event_run.cc).
      for (size_t s = 1; s <= k; ++s) {
        group.clear();
        for (size_t i = 0; i < rows; ++i) {
          const std::string code = o.prefix + "-" + std::to_string(first + static_cast<int64_t>(i));
          auto step_code = [&](size_t step) { return code + "#" + std::to_string(step); };
          const std::string ledger = nlohmann::json{{"ledger", step_code(s)}}.dump();
          events::StepSuccess x;
          x.event_id = *first_id + static_cast<int64_t>(i);
          x.attempt = 1;
          x.finish = s == k;
          x.result_json = s == k ? result : "";
          x.progress = static_cast<int>(100 * s / k);
          x.touch = false;  // no-op steps: within the touch interval
          x.rows.push_back({saga::kDemoLedgerHead, saga::kDemoLedgerTail, {step_code(s), code, "s" + std::to_string(s)}});
          if (s == 1) {
            x.claim = true;
            x.version = 2;  // as assigned
            for (size_t j = 1; j <= k; ++j) {
              events::NewStep row{.code = step_code(j), .job_code = code, .tenant_id = "bench",
                                  .sort = static_cast<int>(j), .type = "demo", .name = "s" + std::to_string(j),
                                  .max_retry = 3, .payload = "{}", .executing = j == 2};
              if (j == 1) {
                row.succeeded = true;
                row.output = ledger;
                row.compensation = ledger;
              }
              x.plan.push_back(std::move(row));
            }
          } else {
            x.version = 3;  // claimed
            x.step_code = step_code(s);
            x.output = ledger;
            x.compensation = ledger;
            x.next_code = s < k ? step_code(s + 1) : "";
          }
          group.push_back(std::move(x));
        }
        c.Begin();
        try {
          if (!events::ApplyStepSuccesses(c, group, node)) throw std::runtime_error("ceiling: a group's fence failed");
          c.Commit();
        } catch (...) {
          c.Rollback();
          throw;
        }
        commits += 1;
        lap(2);
      }
      ++batches;
    }
  }

  void RunMinimal() {
    std::vector<Value> v;
    std::vector<Value> ids, step_codes;
    const size_t k = static_cast<size_t>(o.steps);
    int64_t first;
    size_t rows;
    while (TakeBatch(first, rows)) {
      const CeilingSql& q = Sql(rows);
      Laps lap{stage_s};
      // 1 insert (the producer's statement) and the ids it got.
      InsertRows(c, o, first, static_cast<int>(rows));
      auto first_id = c.QueryInt("SELECT LAST_INSERT_ID()");
      if (!first_id) throw std::runtime_error("ceiling: no LAST_INSERT_ID()");
      statements += 2;
      ids.clear();
      for (size_t i = 0; i < rows; ++i) ids.emplace_back(*first_id + static_cast<int64_t>(i));
      lap(0);
      // 2 assign
      Expect(c.Execute(q.assign, node, storage::Values(ids)), rows, "assign");
      lap(1);
      // 3 claim
      Expect(c.Execute(q.claim, node, events::ToText(events::EventStatus::kRunning), "claimed, attempt 1", storage::Values(ids), node), rows, "claim");
      lap(2);
      statements += 2;
      if (o.tx_per_batch) {
        c.Begin();
        ++statements;
      }
      try {
        // 4 steps: the plan, step 1 EXECUTING
        step_codes.clear();
        StepRows(first, rows, v, &step_codes);
        Expect(c.Execute(q.insert_steps, storage::Values(v)), rows * k, "steps");
        lap(3);
        // 5 ledger
        v.clear();
        for (size_t i = 0; i < rows; ++i) {
          std::string code = o.prefix + "-" + std::to_string(first + static_cast<int64_t>(i));
          for (size_t s = 1; s <= k; ++s) {
            v.emplace_back(step_codes[i * k + s - 1]);
            v.emplace_back(code);
            v.emplace_back("s" + std::to_string(s));
          }
        }
        Expect(c.Execute(q.insert_ledger, storage::Values(v)), rows * k, "ledger");
        lap(4);
        // 6 steps SUCCESS
        Expect(c.Execute(q.steps_ok, storage::Values(step_codes)), rows * k, "step_ok");
        lap(5);
        // 7 event SUCCESS
        Expect(c.Execute(q.done, node, events::ToText(events::EventStatus::kSuccess), "all steps succeeded", "{\"steps\":" + std::to_string(k) + "}",
                         storage::Values(ids)),
               rows, "done");
        statements += 4;
        if (o.tx_per_batch) {
          c.Commit();
          ++statements;
          commits += 4;  // insert, assign, claim, the group
        } else {
          commits += 7;
        }
        lap(6);
      } catch (...) {
        if (o.tx_per_batch) c.Rollback();
        throw;
      }
      ++batches;
    }
  }
};

// User + system CPU of this process so far, in seconds.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

int Ceiling(const Options& o) {
  storage::DbUrl url = storage::DbUrl::Parse(o.url);
  Connection control(url);
  // Multi-row INSERT ids are consecutive only at innodb_autoinc_lock_mode 0 or 1.
  auto lock_mode = control.QueryInt("SELECT @@innodb_autoinc_lock_mode");
  if (!lock_mode || *lock_mode > 1) {
    throw std::runtime_error("ceiling: needs innodb_autoinc_lock_mode 0 or 1 (consecutive ids of a multi-row INSERT)");
  }
  if (control.QueryInt("SELECT COUNT(*) FROM distribute_event").value_or(0) != 0) {
    throw std::runtime_error("ceiling: distribute_event is not empty (use a freshly migrated schema)");
  }
  std::vector<std::unique_ptr<Connection>> conns;
  for (int t = 0; t < o.threads; ++t) conns.push_back(std::make_unique<Connection>(url));
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::string error;
  std::mutex error_mu;
  std::vector<std::unique_ptr<CeilingWorker>> workers;
  for (int t = 0; t < o.threads; ++t) {
    workers.push_back(std::make_unique<CeilingWorker>(o, *conns[t], "127.0.0.1:" + std::to_string(9001 + t), next, failed));
  }
  ServerCounters before = ReadCounters(control);
  const double client_cpu_before = ProcessCpuSeconds();
  auto start = Steady::now();
  {
    std::vector<std::jthread> threads;
    for (auto& w : workers) {
      threads.emplace_back([&, w = w.get()] {
        try {
          w->Run();
        } catch (const std::exception& e) {
          std::lock_guard lock(error_mu);
          if (!failed) error = e.what();
          failed = true;
        }
      });
    }
  }
  double secs = Seconds(Steady::now() - start);
  if (failed) throw std::runtime_error(error);
  ServerCounters after = ReadCounters(control);
  const double client_cpu_s = ProcessCpuSeconds() - client_cpu_before;

  // Every event done, with its steps and ledger rows.
  const int64_t n = o.count, k = o.steps;
  auto count = [&](const char* sql) { return control.QueryInt(sql).value_or(-1); };
  // exact: assigned (version 2, one log entry), claimed at commit (3) and, after
  // more than one step, finished by its own status change (4).
  const std::string done_check = o.exact ? (k == 1 ? "version = 3 AND JSON_LENGTH(process_log) = 2"
                                                    : "version = 4 AND JSON_LENGTH(process_log) = 3")
                                          : "version = 4 AND JSON_LENGTH(process_log) = 2";
  int64_t ok = control.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE status = " DSYNC_SQL_STATUS(SUCCESS) " AND progress = 100 "
                                "AND attempt = 1 AND " + done_check).value_or(-1);
  int64_t steps_ok = count("SELECT COUNT(*) FROM distribute_event_step WHERE status = " DSYNC_SQL_STATUS(SUCCESS));
  int64_t ledger = count("SELECT COUNT(*) FROM demo_ledger WHERE applications = 1");
  if (o.exact) {
    // Every step went through EXECUTING on its node at attempt 1 (steps 2..K by the advance).
    steps_ok = count("SELECT COUNT(*) FROM distribute_event_step WHERE status = " DSYNC_SQL_STATUS(SUCCESS) " AND attempt = 1 "
                     "AND node_address IS NOT NULL AND started_at IS NOT NULL AND executed_at IS NOT NULL "
                     "AND JSON_VALUE(output, '$.ledger') = code");
  }
  if (ok != n || steps_ok != n * k || ledger != n * k) {
    throw std::runtime_error("ceiling: check failed: SUCCESS events " + std::to_string(ok) + " of " + std::to_string(n) +
                             ", SUCCESS steps " + std::to_string(steps_ok) + " and ledger rows " +
                             std::to_string(ledger) + " of " + std::to_string(n * k));
  }

  int64_t statements = 0, commits = 0, batches = 0;
  double stage_s[kStages] = {};
  for (auto& w : workers) {
    statements += w->statements;
    commits += w->commits;
    batches += w->batches;
    for (int s = 0; s < kStages; ++s) stage_s[s] += w->stage_s[s];
  }
  std::string stages;
  const int stage_count = o.exact ? kExactStages : kMinimalStages;
  const char* const* stage_names = o.exact ? kExactStageNames : kMinimalStageNames;
  if (o.exact) statements = after.questions - before.questions - 2;  // less this program's 2 reads
  for (int s = 0; s < stage_count; ++s) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s:%.2f", s == 0 ? "" : ",", stage_names[s],
                  1000.0 * stage_s[s] / static_cast<double>(batches));
    stages += buf;
  }
  const double dn = static_cast<double>(n);
  const int64_t per_event = o.exact ? 4 * k + 1 : 4 + 3 * k;
  const int64_t row_writes = n * per_event;
  std::printf("RESULT ceiling steps=%lld threads=%d batch=%d shape=%s events_per_s=%.0f row_writes_per_s=%.0f statements=%lld "
              "statements_per_event=%.3f tx=%s commits_per_event=%.3f events=%lld seconds=%.3f row_writes_per_event=%lld "
              "handler_row_writes_per_event=%.2f fsyncs_per_event=%.3f client_cpu_us_per_event=%.1f stage_ms=%s\n",
              static_cast<long long>(k), o.threads, o.batch, o.exact ? "exact" : "minimal", dn / secs, static_cast<double>(row_writes) / secs,
              static_cast<long long>(statements), static_cast<double>(statements) / dn,
              o.tx_per_batch ? "per_batch" : "per_stage", static_cast<double>(commits) / dn, static_cast<long long>(n),
              secs, static_cast<long long>(per_event), static_cast<double>(after.row_writes - before.row_writes) / dn,
              static_cast<double>(after.fsyncs - before.fsyncs) / dn, client_cpu_s * 1e6 / dn, stages.c_str());
  return 0;
}

}  // namespace
}  // namespace dsync::bench

int main(int argc, char** argv) {
  return dsync::bench::BenchMain("dsync_load_bench", [&] {
    dsync::bench::Options options = dsync::bench::ParseArgs(argc, argv);
    if (options.command == "produce") return dsync::bench::Produce(options);
    if (options.command == "produce-api") return dsync::bench::ProduceApi(options);
    if (options.command == "ceiling") return dsync::bench::Ceiling(options);
    return dsync::bench::Probe(options);
  });
}
