// The load side of the end-to-end benchmarks (scripts/bench.sh sections produce, e2e,
// latency, failover, rss): a producer that inserts events with plain prepared SQL as
// any client would, and a probe of the database's round-trip and commit costs.
//
//   dsync_load_bench produce --db URL --count N [--rows-per-statement K] [--connections C]
//                            [--rate R] [--tick-ms T] [--topic T] [--prefix P] [--payload JSON]
//   dsync_load_bench produce-api --api http://HOST:PORT --count N [--rows-per-statement K]
//                            [--connections C] [--topic T] [--prefix P] [--payload JSON]
//   dsync_load_bench probe   --db URL [--count N]
//
// produce: inserts N events (tenant `bench`, code `<prefix>-<i>`, data_id `d-<i>`, the
//   topic, the payload) with the DESIGN.md producer statement
//     INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES (...), ...
//   K rows per statement [1: single INSERTs], each statement autocommitted, spread over C
//   connections [1], each a thread with its own share of the codes. With --rate R
//   (events/s, one connection only) it paces itself: every T ms [10] it inserts what is
//   due by then (floor(R * elapsed) minus what it has sent, at most K rows per statement),
//   so a slow statement is caught up in the next tick. Prints
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
// Errors end the program with exit code 1 and one line on stderr; bad flags exit 2.
// Thread safety: produce's threads each own one Connection; nothing else is shared.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/URI.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
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
  std::string topic = "E2E_1";
  std::string prefix = "ev";
  std::string payload = "{}";
};

[[noreturn]] void Usage(const std::string& why) {
  throw UsageError(why +
                   " (usage: dsync_load_bench produce --db URL --count N [--rows-per-statement K] "
                   "[--connections C] [--rate R] [--tick-ms T] [--topic T] [--prefix P] [--payload JSON] | "
                   "probe --db URL [--count N])");
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  if (argc < 2) Usage("missing command");
  o.command = argv[1];
  if (o.command != "produce" && o.command != "produce-api" && o.command != "probe") Usage("unknown command '" + o.command + "'");
  if (o.command == "probe") o.count = 2000;
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
    else if (a == "--topic") o.topic = value(i, a);
    else if (a == "--prefix") o.prefix = value(i, a);
    else if (a == "--payload") o.payload = value(i, a);
    else Usage("unknown flag " + a);
  }
  if (o.command == "produce-api" ? o.api.empty() : o.url.empty()) Usage("--db (or --api) is required");
  if (o.command != "probe" && o.count == 0) Usage("--count is required");
  if (o.rate > 0 && o.connections != 1) Usage("--rate works with one connection");
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

int Produce(const Options& o) {
  storage::DbUrl url = storage::DbUrl::Parse(o.url);
  std::atomic<int64_t> statements{0};
  int64_t max_lag = 0;
  Steady::time_point start;
  if (o.rate > 0) {
    Connection c(url);
    start = Steady::now();
    int64_t sent = 0;
    auto next_tick = start;
    while (sent < o.count) {
      int64_t due = std::min<int64_t>(o.count, static_cast<int64_t>(o.rate * Seconds(Steady::now() - start)));
      max_lag = std::max(max_lag, due - sent);
      while (sent < due) {
        int rows = static_cast<int>(std::min<int64_t>(due - sent, o.rows_per_statement));
        InsertRows(c, o, sent, rows);
        sent += rows;
        ++statements;
      }
      next_tick += std::chrono::milliseconds(o.tick_ms);
      std::this_thread::sleep_until(next_tick);
    }
  } else {
    // Each connection takes a contiguous share of the codes; connections open first
    // so the timing covers the inserts only.
    std::vector<std::unique_ptr<Connection>> conns;
    for (int t = 0; t < o.connections; ++t) conns.push_back(std::make_unique<Connection>(url));
    std::vector<std::jthread> threads;
    std::atomic<bool> failed{false};
    std::string error;
    std::mutex error_mu;
    start = Steady::now();
    for (int t = 0; t < o.connections; ++t) {
      threads.emplace_back([&, t] {
        int64_t begin = o.count * t / o.connections, end = o.count * (t + 1) / o.connections;
        try {
          for (int64_t k = begin; k < end && !failed; k += o.rows_per_statement) {
            int rows = static_cast<int>(std::min<int64_t>(end - k, o.rows_per_statement));
            InsertRows(*conns[t], o, k, rows);
            ++statements;
          }
        } catch (const std::exception& e) {
          std::lock_guard lock(error_mu);
          failed = true;
          error = e.what();
        }
      });
    }
    threads.clear();
    if (failed) throw std::runtime_error(error);
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
  std::atomic<bool> failed{false};
  std::string error;
  std::mutex error_mu;
  auto start = Steady::now();
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < o.connections; ++t) {
      threads.emplace_back([&, t] {
        int64_t begin = o.count * t / o.connections, end = o.count * (t + 1) / o.connections;
        try {
          for (int64_t k = begin; k < end && !failed; k += o.rows_per_statement) {
            int rows = static_cast<int>(std::min<int64_t>(end - k, o.rows_per_statement));
            PostBatch(*sessions[t], o, k, rows);
            ++requests;
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

}  // namespace
}  // namespace dsync::bench

int main(int argc, char** argv) {
  try {
    dsync::SetupLogging("warn", "bench");
    dsync::bench::Options options = dsync::bench::ParseArgs(argc, argv);
    if (options.command == "produce") return dsync::bench::Produce(options);
    if (options.command == "produce-api") return dsync::bench::ProduceApi(options);
    return dsync::bench::Probe(options);
  } catch (const dsync::UsageError& e) {
    std::cerr << "dsync_load_bench: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dsync_load_bench: " << e.what() << '\n';
    return 1;
  }
}
