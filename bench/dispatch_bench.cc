// The dispatcher benchmark (issue 3): how fast dispatcher::DispatchCycle assigns a
// backlog, and whether a table full of finished events slows it down.
//
//   dsync_dispatch_bench [--db URL] [--pending N] [--terminal N] [--nodes N] [--runs N]
//                        [--batch-size N] [--source-dir DIR] [--explain-json] [--keep-schema]
//
// URL: --db, the first positional argument, or DSYNC_BENCH_DB_URL. The bench creates
// its own schema `dsync_bench_<pid>` on that server, migrates it and drops it at the end
// (unless --keep-schema); it never touches another schema.
//
// What it does (defaults in brackets):
//   1. registers [8] live nodes of service kbs-sync (registry rows; capacity = pending,
//      so no node ever fills up; topics ["*"]); a keep-alive thread refreshes their
//      heartbeats and renews the dispatcher lease every second, by SQL, during the run;
//   2. inserts [100,000] PENDING events, 1,000 rows per multi-row INSERT. The mix, for
//      event k: topic by k % 10 (SPACE_ADD 30%, DOC_SYNC 30%: ordered; USER_SYNC 20%,
//      AUDIT_LOG 20%: unordered), tenant `tenant-<k % 16>`, priority -1 for every 20th
//      event (5%) else 0; ordered events each have their own entity `doc-<k>` (every
//      one can be assigned while nothing completes), unordered ones share 500 hot
//      entities `hot-<k % 500>`; a ~100-byte JSON payload;
//   3. drives DispatchCycle::RunOnce as the lease holder (fenced by the lease token,
//      as DispatcherService does), [batch_size 500], fairness off (the (priority, id)
//      pages every figure of this bench was measured with; bench.sh's sections that run
//      dsync processes have the config's default, fair), and records assignments/s
//      (events assigned / wall time of the cycles) and the latency of every cycle, in two modes,
//      [3] runs each, each run after resetting the events to PENDING by SQL (a primary
//      key range) and waiting for InnoDB purge; the median run counts:
//        backlog  the issue's measurement: cycles until every event is ASSIGNED. Nodes
//                 never complete anything, so the in-flight rows grow from 0 to 100k
//                 during a run (in production they stay below the nodes' capacity);
//        steady   between cycles, untimed, every ASSIGNED event is set SUCCESS (the
//                 consumers finish at once), so each cycle starts with nothing in flight;
//                 these finished rows add up to 100k terminal rows during a run;
//   4. prints the EXPLAIN (and MariaDB's ANALYZE, which adds the rows actually read, and
//      the median time of 5 executions) of every statement the cycle and the sweeper
//      run, with the backlog half dispatched and 1,000 events RUNNING; the in-flight
//      count also at the end of a backlog run;
//   5. inserts [1,000,000] terminal events (SUCCESS 90%, COMPENSATED 7%, FAILED 3%):
//      terminal row n repeats the topic, tenant and entity of pending event n % pending
//      (so every ordered entity has a history of 10 finished events), node_address one of
//      the live nodes, times spread over the past 11.6 days; INSERT ... SELECT from a
//      derived table of digits, 100,000 rows per statement (portable: no SEQUENCE engine);
//      then ANALYZE TABLE, as for the pending events;
//   6. repeats 3 and 4, and prints the ratio of the rates per mode (target >= 0.90).
//
// Output: "RESULT ..." lines (key=value) for scripts, the rest for people.
// The statements EXPLAINed are the real ones, exported by events/ (assign, reset), the
// registry and the lease (each names the function it comes from).
//
// Thread safety: the main thread drives everything; the keep-alive thread only runs
// its two statements on its own pooled connection.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "bench/bench_main.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "dispatcher/assignment_planner.h"
#include "dispatcher/dispatch_cycle.h"
#include "dispatcher/lease_lock.h"
#include "events/assign.h"
#include "events/reset.h"
#include "events/status.h"
#include "registry/node_directory.h"
#include "registry/offline_sweeper.h"
#include "registry/node_metadata.h"
#include "storage/connection.h"
#include "storage/connection_pool.h"
#include "storage/db_url.h"
#include "storage/migrator.h"

namespace dsync::bench {
namespace {

using Steady = std::chrono::steady_clock;
using storage::Connection;
using storage::Value;

constexpr const char* kService = "kbs-sync";
constexpr int kTenants = 16;
constexpr int kHotEntities = 500;
constexpr int kRowsPerInsert = 1000;
constexpr int kTerminalRowsPerInsert = 100000;  // 10^5: five digit tables
constexpr Millis kOfflineTimeout{30000};        // registry.offline_timeout_ms default
constexpr Millis kLeaseTtl{10000};              // dispatcher.lease_ttl_ms default
constexpr Millis kTopicTimeout{300000};         // max_processing_time_ms default

// Topic of event k by k % 10; the first six slots are ordered topics.
constexpr const char* kTopicBySlot[10] = {"SPACE_ADD", "SPACE_ADD", "SPACE_ADD", "DOC_SYNC",  "DOC_SYNC",
                                          "DOC_SYNC",  "USER_SYNC", "USER_SYNC", "AUDIT_LOG", "AUDIT_LOG"};
constexpr int kOrderedSlots = 6;
constexpr const char* kUnorderedTopics = "USER_SYNC,AUDIT_LOG";
constexpr const char* kAllTopics = "AUDIT_LOG,DOC_SYNC,SPACE_ADD,USER_SYNC";

struct Options {
  std::string url;
  int64_t pending = 100000;
  int64_t terminal = 1000000;
  int nodes = 8;
  int runs = 3;
  int batch_size = 500;  // dispatcher.batch_size default
  std::string source_dir;
  bool explain_json = false;
  bool keep_schema = false;
};

[[noreturn]] void Usage(const std::string& why) {
  throw UsageError(why + " (usage: dsync_dispatch_bench [--db URL] [--pending N] [--terminal N] "
                         "[--nodes N] [--runs N] [--batch-size N] [--source-dir DIR] [--explain-json] "
                         "[--keep-schema])");
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  if (const char* env = std::getenv("DSYNC_BENCH_DB_URL")) o.url = env;
  auto number = [&](int& i, const std::string& flag) -> int64_t {
    if (i + 1 >= argc) Usage(flag + " needs a value");
    std::string v = argv[++i];
    char* end = nullptr;
    long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 0) Usage(flag + ": not a non-negative number: " + v);
    return n;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--db") {
      if (i + 1 >= argc) Usage("--db needs a value");
      o.url = argv[++i];
    } else if (a == "--pending") {
      o.pending = number(i, a);
    } else if (a == "--terminal") {
      o.terminal = number(i, a);
    } else if (a == "--nodes") {
      o.nodes = static_cast<int>(number(i, a));
    } else if (a == "--runs") {
      o.runs = static_cast<int>(number(i, a));
    } else if (a == "--batch-size") {
      o.batch_size = static_cast<int>(number(i, a));
    } else if (a == "--source-dir") {
      if (i + 1 >= argc) Usage("--source-dir needs a value");
      o.source_dir = argv[++i];  // accepted for old scripts: the statements are no longer copies
    } else if (a == "--explain-json") {
      o.explain_json = true;
    } else if (a == "--keep-schema") {
      o.keep_schema = true;
    } else if (a == "--help" || a == "-h") {
      Usage("help");
    } else if (!a.empty() && a[0] != '-') {
      o.url = a;  // a positional URL overrides the environment
    } else {
      Usage("unknown option " + a);
    }
  }
  if (o.url.empty()) Usage("no database URL (--db, first argument or DSYNC_BENCH_DB_URL)");
  if (o.pending < 1 || o.nodes < 1 || o.runs < 1 || o.batch_size < 1) Usage("counts must be >= 1");
  return o;
}

std::string NodeAddress(int i) { return "bench-node-" + std::to_string(i + 1) + ":7001"; }

// ---------------------------------------------------------------------------------
// Fixture SQL (the bench's own statements).

// Params: service, address, metadata JSON, incarnation.
constexpr const char* kRegisterNode = R"(
INSERT INTO distribute_node_registry (service_name, node_address, status, last_heartbeat_time,
                                      metadata, incarnation)
VALUES (?, ?, 1, NOW(3), ?, ?))";

// Params: service. The simulated nodes' heartbeats.
constexpr const char* kHeartbeat = R"(
UPDATE distribute_node_registry SET last_heartbeat_time = NOW(3)
WHERE service_name = ? AND status = 1)";

// Params: first and last id of the bench's pending events. Every one of them back to
// PENDING, as produced (a primary-key range: the terminal rows are never touched).
constexpr const char* kResetToPending = R"(
UPDATE distribute_event
SET status = )" DSYNC_SQL_STATUS(PENDING) R"(, fair_pending = 1, node_address = NULL, version = version + 1, assigned_time = NULL,
    finished_time = NULL, next_run_time = '1970-01-01 00:00:00.000'
WHERE id BETWEEN ? AND ? AND status <> )" DSYNC_SQL_STATUS(PENDING);

// The steady mode's consumers: every ASSIGNED event completes at once (run between
// cycles, not timed), so each cycle starts with nothing in flight.
constexpr const char* kCompleteAssigned = R"(
UPDATE distribute_event
SET status = )" DSYNC_SQL_STATUS(SUCCESS) R"(, version = version + 1, finished_time = NOW(3)
WHERE status = )" DSYNC_SQL_STATUS(ASSIGNED);  // fair_pending is 0 since the assignment (V029)

// The first and last id of the bench's pending events (uk_code range).
constexpr const char* kPendingIdRange = R"(
SELECT MIN(id), MAX(id) FROM distribute_event WHERE code LIKE 'bench-p-%')";

// Params: limit. Gives part of the in-flight events a RUNNING status before the
// EXPLAINs, so the sweeper's timeout query has rows of its statuses to consider.
constexpr const char* kSomeRunning = R"(
UPDATE distribute_event SET status = )" DSYNC_SQL_STATUS(RUNNING) R"(, version = version + 1, attempt = attempt + 1,
    started_time = NOW(3)
WHERE status = )" DSYNC_SQL_STATUS(ASSIGNED) R"( ORDER BY id LIMIT ?)";

constexpr const char* kCountByStatus = R"(
SELECT status, COUNT(*) FROM distribute_event GROUP BY status ORDER BY status)";

constexpr const char* kAssignedPerNode = R"(
SELECT node_address, COUNT(*) FROM distribute_event WHERE status = )" DSYNC_SQL_STATUS(ASSIGNED) R"(
GROUP BY node_address)";

// InnoDB's undo history not yet purged (MariaDB and MySQL 8 alike).
constexpr const char* kHistoryLength = R"(
SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len')";

// Params: the number of rows. The pending events' INSERT of `rows` rows.
std::string InsertPendingSql(int rows) {
  std::string sql = "INSERT INTO distribute_event (tenant_id, code, data_id, topic, priority, payload) VALUES ";
  for (int i = 0; i < rows; ++i) sql += i == 0 ? "(?, ?, ?, ?, ?, ?)" : ", (?, ?, ?, ?, ?, ?)";
  return sql;
}

// Params: pending count P, total T, first n, total T. Inserts terminal rows n in
// [first, min(first + 100000, T)): n = first + the five digits; k = n mod P is the
// pending event whose topic, tenant and entity the row repeats; s = n mod 100 picks
// the status (SUCCESS < 90 <= COMPENSATED < 97 <= FAILED). create_time is T - n seconds
// ago; the row went through the whole lifecycle 50 ms / 100 ms / 1.5 s after it.
std::string InsertTerminalSql() {
  const std::string digits =
      "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 "
      "UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)";
  std::string topics;
  for (const char* t : kTopicBySlot) topics += std::string(", '") + t + "'";
  return R"(
INSERT INTO distribute_event (creator, create_time, modifier, modifier_time, tenant_id, code,
  data_id, topic, status, phase, payload, progress, result, retry_count, node_address, version,
  priority, next_run_time, attempt, assigned_time, started_time, finished_time, trace_id,
  last_error)
SELECT 'bench', t.created, 'bench', t.created + INTERVAL 1500000 MICROSECOND,
  CONCAT('tenant-', MOD(t.k, 16)), CONCAT('bench-t-', t.n),
  IF(MOD(t.k, 10) < 6, CONCAT('doc-', t.k), CONCAT('hot-', MOD(t.k, 500))),
  ELT(1 + MOD(t.k, 10))" + topics + R"(),
  CASE WHEN t.s < 90 THEN )" DSYNC_SQL_STATUS(SUCCESS) R"( WHEN t.s < 97 THEN )" DSYNC_SQL_STATUS(COMPENSATED) R"( ELSE )" DSYNC_SQL_STATUS(FAILED) R"( END,
  IF(t.s < 90, 'FORWARD', 'COMPENSATE'),
  CONCAT('{"space_id":', t.k, ',"doc_ids":[1,2,3],"source":"env_a","target":"env_b","note":"bench"}'),
  IF(t.s < 90, 100, 50),
  IF(t.s < 90, '{"steps":2,"ok":true}', '{"steps":2,"ok":false,"compensated":1}'),
  IF(t.s < 97, 0, 3),
  CONCAT('bench-node-', 1 + MOD(t.n, 8), ':7001'),
  IF(t.s < 90, 4, IF(t.s < 97, 5, 9)),
  IF(MOD(t.k, 20) = 0, -1, 0),
  t.created, IF(t.s < 97, 1, 4),
  t.created + INTERVAL 50000 MICROSECOND, t.created + INTERVAL 100000 MICROSECOND,
  t.created + INTERVAL 1500000 MICROSECOND,
  CONCAT('trace-', t.n),
  IF(t.s < 90, NULL, IF(t.s < 97, 'step docs: permanent failure (bench)', 'compensation of space failed (bench)'))
FROM (SELECT g.n, MOD(g.n, ?) AS k, MOD(g.n, 100) AS s, NOW(3) - INTERVAL (? - g.n) SECOND AS created
      FROM (SELECT ? + d0.d + 10 * d1.d + 100 * d2.d + 1000 * d3.d + 10000 * d4.d AS n
            FROM )" + digits + " d0 CROSS JOIN " + digits + " d1 CROSS JOIN " + digits +
         " d2 CROSS JOIN " + digits + " d3 CROSS JOIN " + digits + R"( d4) g
      WHERE g.n < ?) t)";
}

// ---------------------------------------------------------------------------------
// The dispatcher's and sweeper's statements, as their modules export them (for
// EXPLAIN only; the cycle runs its own): no copies to drift.

struct Statement {
  std::string name;
  std::string source;  // the function that exports it
  std::string sql;
};

// ---------------------------------------------------------------------------------

int64_t Micros(Millis d) { return static_cast<int64_t>(d.count()) * 1000; }

double Ms(Steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Nearest-rank percentile of an unsorted sample.
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }

std::string Fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a.empty() ? "?" : a + " " + b + " " + c;
}

// Prints a result set as an aligned table; returns its rows (NULL as "NULL").
std::vector<std::vector<std::string>> PrintTable(storage::ResultSet& rs, const std::string& indent) {
  const int cols = rs.columnCount();
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header;
  for (int i = 1; i <= cols; ++i) header.push_back(rs.columnLabel(i));
  while (rs.next()) {
    std::vector<std::string> row;
    for (int i = 1; i <= cols; ++i) row.push_back(rs.isNull(i) ? "NULL" : std::string(rs.getString(i)));
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(cols, 0);
  for (int i = 0; i < cols; ++i) {
    width[i] = header[i].size();
    for (const auto& r : rows) width[i] = std::max(width[i], r[i].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string out = indent;
    for (int i = 0; i < cols; ++i) {
      out += r[i];
      if (i + 1 < cols) out += std::string(width[i] - r[i].size() + 2, ' ');
    }
    std::cout << out << '\n';
  };
  line(header);
  for (const auto& r : rows) line(r);
  rows.insert(rows.begin(), header);
  return rows;
}

// ---------------------------------------------------------------------------------

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)) {}

  int Run() {
    storage::DbUrl server = storage::DbUrl::Parse(o_.url);
    schema_ = "dsync_bench_" + std::to_string(getpid());
    {
      Connection admin(server);
      admin.ExecuteDdl("DROP DATABASE IF EXISTS `" + schema_ + "`");
      admin.ExecuteDdl("CREATE DATABASE `" + schema_ + "` CHARACTER SET utf8mb4");
    }
    struct DropSchema {
      Bench* b;
      storage::DbUrl server;
      ~DropSchema() {
        b->pool_.reset();
        if (b->o_.keep_schema) {
          std::cout << "schema kept: " << b->schema_ << '\n';
          return;
        }
        try {
          Connection admin(server);
          admin.ExecuteDdl("DROP DATABASE IF EXISTS `" + b->schema_ + "`");
        } catch (const std::exception& e) {
          std::cerr << "bench: could not drop schema " << b->schema_ << ": " << e.what() << '\n';
        }
      }
    } drop{this, server};

    pool_ = std::make_unique<storage::ConnectionPool>(server.WithSchema(schema_));
    storage::Migrator(*pool_).Migrate();
    PrintSetup(server);

    RegisterNodes();
    dispatcher::LeaseLock lease(*pool_, dispatcher::DispatcherLockName(kService), dispatcher::MakeLeaseOwnerId());
    std::optional<int64_t> token = lease.TryAcquire(kLeaseTtl);
    if (!token) throw std::runtime_error("could not acquire the dispatcher lease of a fresh schema");
    fence_ = lease.Fence(*token);
    std::jthread keep_alive([&](std::stop_token stop) { KeepAlive(lease, *token, stop); });

    auto t0 = Steady::now();
    InsertPending();
    std::cout << "inserted " << o_.pending << " PENDING events in " << Fixed(Ms(Steady::now() - t0) / 1000, 2)
              << " s\n";
    pool_->Run("pending ids", [&](Connection& c) {
      auto rs = c.Query(kPendingIdRange);
      rs->next();
      pending_ids_ = {rs->getInt64(1), rs->getInt64(2)};
    });
    Analyze();

    const std::string none_label = "terminal=0";
    const std::string full_label = "terminal=" + std::to_string(o_.terminal);
    Figures none = Measure(none_label, Mode::kBacklog, /*fresh=*/true);
    Figures none_steady = Measure(none_label, Mode::kSteady, /*fresh=*/false);
    Explain(none_label);

    Figures full = none, full_steady = none_steady;
    if (o_.terminal > 0) {
      t0 = Steady::now();
      InsertTerminal();
      const double secs = Ms(Steady::now() - t0) / 1000;
      std::cout << "\ninserted " << o_.terminal << " terminal events in " << Fixed(secs, 1) << " s ("
                << Fixed(static_cast<double>(o_.terminal) / secs, 0) << " rows/s)\n";
      Analyze();
      full = Measure(full_label, Mode::kBacklog, /*fresh=*/false);
      full_steady = Measure(full_label, Mode::kSteady, /*fresh=*/false);
      Explain(full_label);
    }

    keep_alive.request_stop();
    keep_alive.join();
    try {
      lease.Release();
    } catch (const DbError&) {
    }

    std::cout << "\n== dispatch summary (" << o_.pending << " pending, " << o_.nodes << " nodes, batch "
              << o_.batch_size << ", median of " << o_.runs << " runs; load average now " << LoadAverage()
              << ")\n";
    PrintSummary(none_label, Mode::kBacklog, none);
    if (o_.terminal > 0) PrintSummary(full_label, Mode::kBacklog, full);
    PrintSummary(none_label, Mode::kSteady, none_steady);
    if (o_.terminal > 0) PrintSummary(full_label, Mode::kSteady, full_steady);
    if (o_.terminal > 0) {
      for (Mode mode : {Mode::kBacklog, Mode::kSteady}) {
        const double ratio =
            mode == Mode::kBacklog ? full.rate / none.rate : full_steady.rate / none_steady.rate;
        std::cout << "RESULT dispatch mode=" << ModeName(mode) << " ratio=" << Fixed(ratio, 3)
                  << " target=0.90 met=" << (ratio >= 0.90 ? "yes" : "no") << "  (assignments/s with "
                  << o_.terminal << " terminal rows / with none)\n";
      }
    }
    if (lease_lost_) std::cout << "WARNING: the lease was lost during the run; figures are suspect\n";
    return 0;
  }

 private:
  // backlog: the issue's measurement; nodes never complete anything, so the in-flight
  //   count grows from 0 to `pending` during a run.
  // steady: between cycles (not timed) every ASSIGNED event becomes SUCCESS, as if the
  //   consumers finished at once; each cycle starts with nothing in flight, as in
  //   production where in-flight is bounded by the nodes' capacity. The finished events
  //   stay as terminal rows (up to `pending` more of them by the end of a run).
  enum class Mode { kBacklog, kSteady };
  static const char* ModeName(Mode m) { return m == Mode::kBacklog ? "backlog" : "steady"; }

  struct RunFigures {
    int64_t assigned = 0, lost_races = 0;
    int cycles = 0;
    double seconds = 0, rate = 0;            // of the run; events assigned per second
    double p50_ms = 0, p99_ms = 0, max_ms = 0;  // per cycle
  };
  struct Figures {
    std::vector<RunFigures> runs;
    double rate = 0, p50_ms = 0, p99_ms = 0;  // medians over the runs
    int cycles = 0;                          // of the median-rate run
  };

  void PrintSetup(const storage::DbUrl& server) {
    pool_->Run("setup", [&](Connection& c) {
      std::cout << "== setup\n"
                << "cpus: " << std::thread::hardware_concurrency() << "   load average: " << LoadAverage()
                << "\nserver: " << c.QueryString("SELECT VERSION()").value_or("?")
                << "   innodb_flush_log_at_trx_commit="
                << c.QueryInt("SELECT @@innodb_flush_log_at_trx_commit").value_or(-1)
                << "   innodb_buffer_pool_size="
                << c.QueryInt("SELECT @@innodb_buffer_pool_size").value_or(0) / (1024 * 1024) << "M\n"
                << "database: " << server.Masked() << "  schema " << schema_ << "\n"
                << "workload: " << o_.pending << " pending over " << o_.nodes << " nodes, batch_size "
                << o_.batch_size << ", " << o_.runs << " runs per configuration, then " << o_.terminal
                << " terminal rows\n";
    });
  }

  void RegisterNodes() {
    pool_->Run("register nodes", [&](Connection& c) {
      for (int i = 0; i < o_.nodes; ++i) {
        registry::NodeMetadata md;
        md.version = "bench";
        md.capacity = static_cast<int>(std::min<int64_t>(o_.pending, INT_MAX));  // never full
        md.topics = {"*"};
        md.host = "bench";
        md.incarnation = NodeAddress(i) + ":bench";
        c.Execute(kRegisterNode, kService, NodeAddress(i), md.ToJson(), md.incarnation);
      }
    });
  }

  // Every second: the nodes' heartbeats and the lease renewal, as a live fleet and a
  // leading DispatcherService would do.
  void KeepAlive(dispatcher::LeaseLock& lease, int64_t token, std::stop_token stop) {
    SystemClock clock;
    while (clock.SleepFor(Millis(1000), stop)) {
      try {
        pool_->Run("heartbeat", [&](Connection& c) { c.Execute(kHeartbeat, kService); });
        if (!lease.Renew(token, kLeaseTtl)) {
          lease_lost_ = true;
          leading_ = false;
        }
      } catch (const DbError& e) {
        std::cerr << "bench: keep-alive failed: " << e.what() << '\n';
      }
    }
  }

  void InsertPending() {
    for (int64_t first = 0; first < o_.pending; first += kRowsPerInsert) {
      const int rows = static_cast<int>(std::min<int64_t>(kRowsPerInsert, o_.pending - first));
      std::vector<Value> values;
      values.reserve(static_cast<size_t>(rows) * 6);
      for (int64_t k = first; k < first + rows; ++k) {
        const int slot = static_cast<int>(k % 10);
        values.emplace_back("tenant-" + std::to_string(k % kTenants));
        values.emplace_back("bench-p-" + std::to_string(k));
        values.emplace_back(slot < kOrderedSlots ? "doc-" + std::to_string(k)
                                                 : "hot-" + std::to_string(k % kHotEntities));
        values.emplace_back(std::string(kTopicBySlot[slot]));
        values.emplace_back(int64_t{k % 20 == 0 ? -1 : 0});
        values.emplace_back("{\"space_id\":" + std::to_string(k) +
                            ",\"doc_ids\":[1,2,3],\"source\":\"env_a\",\"target\":\"env_b\",\"note\":\"bench\"}");
      }
      pool_->Run("insert pending", [&](Connection& c) { c.Execute(InsertPendingSql(rows), storage::Values(values)); });
    }
  }

  void InsertTerminal() {
    const std::string sql = InsertTerminalSql();
    for (int64_t first = 0; first < o_.terminal; first += kTerminalRowsPerInsert) {
      pool_->Run("insert terminal", [&](Connection& c) {
        c.Execute(sql, o_.pending, o_.terminal, first, o_.terminal);
      });
    }
  }

  // Fresh optimizer statistics after a bulk load, as a table that grew over time has.
  void Analyze() {
    pool_->Run("analyze", [&](Connection& c) {
      auto rs = c.Query("ANALYZE TABLE distribute_event, distribute_node_registry");
      while (rs->next()) {
      }
    });
  }

  // Waits (at most 120 s) until InnoDB purged the undo history of the last reset, so
  // every run starts without delete-marked index entries to skip.
  void WaitForPurge() {
    auto start = Steady::now();
    int64_t len = -1;
    while (Steady::now() - start < std::chrono::seconds(120)) {
      len = pool_->Run("history length", [&](Connection& c) { return c.QueryInt(kHistoryLength).value_or(0); });
      if (len < 100) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::cout << "  purge: history length " << len << " after " << Fixed(Ms(Steady::now() - start) / 1000, 1)
              << " s\n";
  }

  void ResetToPending() {
    auto t0 = Steady::now();
    uint64_t n = pool_->Run("reset", [&](Connection& c) {
      return c.Execute(kResetToPending, pending_ids_.first, pending_ids_.second);
    });
    std::cout << "  reset " << n << " events to PENDING in " << Fixed(Ms(Steady::now() - t0) / 1000, 1) << " s\n";
    WaitForPurge();
  }

  std::unique_ptr<dispatcher::DispatchCycle> MakeCycle() {
    dispatcher::PlannerConfig planner;
    planner.batch_size = o_.batch_size;
    planner.fair = false;  // the (priority, id) cycle every figure of this bench measured
    for (int slot = 0; slot < 10; ++slot) {
      dispatcher::TopicPolicy p;
      p.ordered = slot < kOrderedSlots;
      planner.topics[kTopicBySlot[slot]] = p;
    }
    dispatcher::CycleOptions options;
    options.service = kService;
    options.offline_timeout = kOfflineTimeout;
    return std::make_unique<dispatcher::DispatchCycle>(*pool_, clock_, planner, options);
  }

  // Drives cycles until `target` events are assigned (all when target < 0).
  RunFigures Drive(int64_t target, Mode mode = Mode::kBacklog) {
    if (target < 0) target = o_.pending;
    auto cycle = MakeCycle();
    RunFigures f;
    std::vector<double> latencies;
    int idle_cycles = 0;
    Steady::duration untimed{0};
    const auto start = Steady::now();
    while (f.assigned < target) {
      const auto c0 = Steady::now();
      dispatcher::CycleResult r = cycle->RunOnce(fence_, [&] { return leading_.load(); });
      latencies.push_back(Ms(Steady::now() - c0));
      ++f.cycles;
      if (mode == Mode::kSteady) {
        const auto d0 = Steady::now();
        pool_->Run("complete", [&](Connection& c) { c.Execute(kCompleteAssigned); });
        untimed += Steady::now() - d0;
      }
      f.assigned += r.assigned;
      f.lost_races += r.lost_races;
      if (r.fenced_out) throw std::runtime_error("fenced out: the bench lost its lease");
      idle_cycles = r.assigned == 0 ? idle_cycles + 1 : 0;
      if (idle_cycles >= 3) {
        throw std::runtime_error("stalled: 3 cycles assigned nothing with " + std::to_string(f.assigned) + " of " +
                                 std::to_string(target) + " assigned (due_read=" + std::to_string(r.due_read) +
                                 " skipped=" + std::to_string(r.skipped) + ")");
      }
    }
    f.seconds = Ms(Steady::now() - start - untimed) / 1000;
    f.rate = static_cast<double>(f.assigned) / f.seconds;
    f.p50_ms = Percentile(latencies, 50);
    // Outliers, to tell a periodic stall (checkpoint, statistics) from a steady cost.
    std::string slow;
    for (size_t i = 0; i < latencies.size(); ++i) {
      if (latencies[i] > 3 * f.p50_ms) slow += " #" + std::to_string(i + 1) + "=" + Fixed(latencies[i], 0) + "ms";
    }
    if (!slow.empty()) std::cout << "  cycles slower than 3x the median:" << slow << '\n';
    f.p99_ms = Percentile(latencies, 99);
    f.max_ms = Percentile(latencies, 100);
    return f;
  }

  void CheckAllAssigned() {
    pool_->Run("check", [&](Connection& c) {
      std::map<std::string, int64_t> per;
      auto rs = c.Query(kAssignedPerNode);
      int64_t total = 0;
      while (rs->next()) {
        per[rs->getString(1)] = rs->getInt64(2);
        total += rs->getInt64(2);
      }
      if (total != o_.pending) {
        throw std::runtime_error("after the run " + std::to_string(total) + " events are ASSIGNED, expected " +
                                 std::to_string(o_.pending));
      }
      int64_t lo = INT64_MAX, hi = 0;
      for (const auto& [node, n] : per) lo = std::min(lo, n), hi = std::max(hi, n);
      std::cout << "  all " << total << " ASSIGNED over " << per.size() << " nodes (" << lo << ".." << hi
                << " each)\n";
    });
  }

  Figures Measure(const std::string& label, Mode mode, bool fresh) {
    std::cout << "\n== dispatch " << label << " mode=" << ModeName(mode) << ": " << o_.runs << " runs (load average "
              << LoadAverage() << ")\n";
    Figures out;
    for (int run = 0; run < o_.runs; ++run) {
      if (!(fresh && run == 0)) ResetToPending();
      RunFigures f = Drive(-1, mode);
      std::cout << "  run " << run + 1 << ": " << f.assigned << " assigned in " << f.cycles << " cycles, "
                << Fixed(f.seconds, 2) << " s, " << Fixed(f.rate, 0) << " assignments/s, cycle p50 "
                << Fixed(f.p50_ms) << " ms p99 " << Fixed(f.p99_ms) << " ms max " << Fixed(f.max_ms)
                << " ms, lost races " << f.lost_races << '\n';
      if (mode == Mode::kBacklog) CheckAllAssigned();
      out.runs.push_back(f);
    }
    // The backlog's end: everything in flight, the in-flight count at its dearest.
    if (mode == Mode::kBacklog) ExplainInFlight("end of a backlog run: " + std::to_string(o_.pending) + " in flight");
    std::vector<double> rates, p50, p99;
    for (const auto& f : out.runs) rates.push_back(f.rate), p50.push_back(f.p50_ms), p99.push_back(f.p99_ms);
    out.rate = Median(rates);
    out.p50_ms = Median(p50);
    out.p99_ms = Median(p99);
    for (const auto& f : out.runs) {
      if (f.rate == out.rate) out.cycles = f.cycles;
    }
    return out;
  }

  void PrintSummary(const std::string& label, Mode mode, const Figures& f) {
    std::string runs;
    for (const auto& r : f.runs) runs += (runs.empty() ? "" : ",") + Fixed(r.rate, 0);
    std::cout << "RESULT dispatch mode=" << ModeName(mode) << " " << label << " pending=" << o_.pending << " nodes=" << o_.nodes
              << " batch=" << o_.batch_size << " assign_per_s=" << Fixed(f.rate, 0)
              << " cycle_p50_ms=" << Fixed(f.p50_ms) << " cycle_p99_ms=" << Fixed(f.p99_ms)
              << " cycles=" << f.cycles << " runs_assign_per_s=" << runs << '\n';
  }

  // ---- EXPLAIN of the dispatcher's statements --------------------------------------

  // Half the backlog dispatched (and 1,000 of those RUNNING): the table holds PENDING,
  // in-flight and (second configuration) terminal rows, as it does in production.
  void Explain(const std::string& label) {
    std::cout << "\n== EXPLAIN " << label << " (state: backlog half dispatched)\n";
    ResetToPending();
    Drive(o_.pending / 2);
    pool_->Run("some running", [&](Connection& c) { c.Execute(kSomeRunning, int64_t{1000}); });
    pool_->Run("counts", [&](Connection& c) {
      auto rs = c.Query(kCountByStatus);
      std::string counts;
      while (rs->next()) counts += " " + rs->getString(1) + "=" + std::to_string(rs->getInt64(2));
      std::cout << "  rows by status:" << counts << '\n';
    });

    // Representative parameters: a first page (cursor at the start), 64 real PENDING
    // events for the assignment, an in-flight event for the read-back and the reset.
    std::vector<Value> chunk;
    int64_t some_assigned = 0, some_assigned_version = 0;
    pool_->Run("params", [&](Connection& c) {
      std::vector<int64_t> ids, versions;
      auto rs = c.Query("SELECT id, version FROM distribute_event WHERE status = " DSYNC_SQL_STATUS(PENDING) " ORDER BY id LIMIT 64");
      while (rs->next()) ids.push_back(rs->getInt64(1)), versions.push_back(rs->getInt64(2));
      while (!ids.empty() && ids.size() < events::kAssignChunkSize) ids.push_back(ids.back()), versions.push_back(versions.back());
      for (int64_t id : ids) chunk.emplace_back(id);
      for (size_t i = 0; i < ids.size(); ++i) chunk.emplace_back(NodeAddress(static_cast<int>(i) % o_.nodes));
      for (int64_t id : ids) chunk.emplace_back(id);
      for (int64_t id : ids) chunk.emplace_back(id);
      for (int64_t v : versions) chunk.emplace_back(v);
      auto a = c.Query("SELECT id, version FROM distribute_event WHERE status = " DSYNC_SQL_STATUS(ASSIGNED) " ORDER BY id LIMIT 1");
      if (a->next()) some_assigned = a->getInt64(1), some_assigned_version = a->getInt64(2);
    });

    const int32_t first = std::numeric_limits<int32_t>::min();
    ExplainOne({"dispatch: live nodes", "registry::LiveNodesSql", registry::LiveNodesSql()}, true,
               [&](Connection& c, const std::string& sql) { return c.Query(sql, kService, Micros(kOfflineTimeout)); });
    ExplainInFlight("");
    ExplainOne({"dispatch: due events + ordering check (NOT EXISTS probes)", "events::DueEventsSql",
                events::DueEventsSql()},
               true, [&](Connection& c, const std::string& sql) {
                 return c.Query(sql, std::string(kService), first, first, int64_t{0}, true, std::string(), std::string(),
                                std::string(kUnorderedTopics), o_.batch_size);
               });
    // Fair dispatch (issue 37): the (priority, tenant) pairs, and one page of windows.
    ExplainOne({"dispatch (fair): pairs with PENDING events (loose index scan)", "events::DueHeadsSql",
                events::DueHeadsSql()},
               true, [&](Connection& c, const std::string& sql) { return c.Query(sql, std::string(kService), 10000); });
    ExplainOne({"dispatch (fair): one page of windows (one pair, padded to 2)", "events::DueWindowsSql",
                events::DueWindowsSql(2)},
               true, [&](Connection& c, const std::string& sql) {
                 std::vector<Value> p;
                 for (int w = 0; w < 2; ++w) {
                   p.insert(p.end(), {Value{int64_t{0}}, Value{std::string("t1")}, Value{std::string(kService)},
                                      Value{int64_t{0}}, Value{true}, Value{std::string()}, Value{std::string()},
                                      Value{std::string(kUnorderedTopics)}, Value{int64_t{w == 0 ? o_.batch_size : 0}}});
                 }
                 return c.Query(sql, storage::Values(p));
               });
    ExplainOne({"dispatch: lease fence (last statement of the write transaction)", "dispatcher::LeaseFenceSql",
                dispatcher::LeaseFenceSql()},
               true, [&](Connection& c, const std::string& sql) {
                 return c.Query(sql, fence_->lock_name, fence_->owner, fence_->token, Micros(fence_->margin));
               });
    if (!chunk.empty()) {
      ExplainOne({"dispatch: assignment UPDATE (64 events per statement)", "events::AssignChunkSql",
                  events::AssignChunkSql()},
                 false, [&](Connection& c, const std::string& sql) { return c.Query(sql, storage::Values(chunk)); });
    }
    ExplainOne({"dispatch: read-back after a lost race", "events::ReadAssignedSql", events::ReadAssignedSql()}, true,
               [&](Connection& c, const std::string& sql) { return c.Query(sql, some_assigned); });
    ExplainOne({"sweeper: orphaned events (node not live)", "events::OrphanedSql", events::OrphanedSql()}, true,
               [&](Connection& c, const std::string& sql) {
                 return c.Query(sql, std::string(kService), Micros(kOfflineTimeout), int64_t{500});
               });
    ExplainOne({"sweeper: timed-out events", "events::TimedOutSql", events::TimedOutSql()}, true,
               [&](Connection& c, const std::string& sql) {
                 return c.Query(sql, std::string(kService), Micros(kTopicTimeout), std::string(kAllTopics), true, std::string(kAllTopics),
                                int64_t{500});
               });
    ExplainOne({"sweeper: conditional reset", "events::ResetEventSql", events::ResetEventSql()}, false,
               [&](Connection& c, const std::string& sql) {
                 return c.Query(sql, std::string("reset: bench"), int64_t{0}, some_assigned, some_assigned_version,
                                events::ToText(events::EventStatus::kAssigned));
               });
    ExplainOne({"sweeper: mark stale nodes offline", "registry::MarkStaleOfflineSql", registry::MarkStaleOfflineSql()}, false,
               [&](Connection& c, const std::string& sql) {
                 return c.Query(sql, Micros(kOfflineTimeout), std::string(kService));
               });
  }

  // The in-flight count as the cycle runs it, and the proposed rewrite beside it.
  void ExplainInFlight(const std::string& state) {
    if (!state.empty()) std::cout << "\n  EXPLAIN at the " << state << ":\n";
    std::vector<Value> nodes;
    for (int i = 0; i < o_.nodes; ++i) nodes.emplace_back(NodeAddress(i));
    nodes.emplace_back(std::string(kService));
    ExplainOne({"dispatch: in-flight count per live node", "events::CountInFlightSql",
                events::CountInFlightSql(static_cast<size_t>(o_.nodes))},
               true, [&](Connection& c, const std::string& sql) { return c.Query(sql, storage::Values(nodes)); });
  }

  // EXPLAIN (and for a read-only SELECT, ANALYZE and a timing of 5 executions) of `s`,
  // `bind` running the given text with the statement's parameters.
  template <class Bind>
  void ExplainOne(const Statement& s, bool select, Bind bind) {
    std::cout << "\n-- " << s.name << "   [" << s.source << "]\n";
    try {
      pool_->Run("explain", [&](Connection& c) {
        auto rs = bind(c, "EXPLAIN " + s.sql);
        auto rows = PrintTable(*rs, "   ");
        PrintPlanNotes(rows);
        if (o_.explain_json) {
          auto js = bind(c, "EXPLAIN FORMAT=JSON " + s.sql);
          if (js->next()) std::cout << js->getString(1) << '\n';
        }
        if (!select) return;
        // MariaDB's ANALYZE runs the statement and adds r_rows: the rows actually read.
        try {
          auto an = bind(c, "ANALYZE " + s.sql);
          std::cout << "   ANALYZE (rows actually read per table, r_rows):\n";
          PrintTable(*an, "   ");
        } catch (const DbError& e) {
          std::cout << "   (ANALYZE not available: " << e.what() << ")\n";
        }
        std::vector<double> times;
        size_t rows_out = 0;
        for (int i = 0; i < 5; ++i) {
          auto t0 = Steady::now();
          auto q = bind(c, s.sql);
          rows_out = 0;
          while (q->next()) ++rows_out;
          times.push_back(Ms(Steady::now() - t0));
        }
        std::cout << "   executed: " << rows_out << " rows, median " << Fixed(Median(times), 2) << " ms of 5\n";
      });
    } catch (const DbError& e) {
      std::cout << "   EXPLAIN failed: " << e.what() << '\n';
    }
  }

  // One line per table of the plan: the access type and index, flagged when a table
  // is read without an index.
  static void PrintPlanNotes(const std::vector<std::vector<std::string>>& rows) {
    if (rows.empty()) return;
    const auto& h = rows[0];
    auto col = [&](const char* name) -> int {
      for (size_t i = 0; i < h.size(); ++i) {
        if (h[i] == name) return static_cast<int>(i);
      }
      return -1;
    };
    const int table = col("table"), type = col("type"), key = col("key"), nrows = col("rows");
    if (table < 0 || type < 0 || key < 0) return;
    std::string notes;
    for (size_t i = 1; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r[table] == "NULL") continue;
      notes += " " + r[table] + ":" + r[type] + "/" + r[key];
      if (nrows >= 0) notes += "~" + r[nrows];
      if (r[type] == "ALL" || r[type] == "index" || r[key] == "NULL") notes += "(full scan)";
    }
    std::cout << "   plan:" << notes << '\n';
  }

  const Options o_;
  std::string schema_;
  std::unique_ptr<storage::ConnectionPool> pool_;
  SystemClock clock_;
  std::optional<dispatcher::LeaseFence> fence_;
  std::pair<int64_t, int64_t> pending_ids_{0, 0};  // first and last id of the pending events
  std::atomic<bool> leading_{true};
  std::atomic<bool> lease_lost_{false};
};

}  // namespace
}  // namespace dsync::bench

int main(int argc, char** argv) {
  return dsync::bench::BenchMain("dsync_dispatch_bench",
                                 [&] { return dsync::bench::Bench(dsync::bench::ParseArgs(argc, argv)).Run(); });
}
