// How long the web console's overview takes: the server side (GET /v1/overview, median
// of 21 calls) and the whole page in Debian's headless Chromium (navigation start to the
// overview's first render, median of 5 fresh loads), on an events table of N rows.
//
//   dsync_console_bench --db mysql://u:p@127.0.0.1:3306/dsync --events 1000000
//       fills a new schema `console_bench` with N events (recursive CTE, a realistic
//       mix: 0.1 % FAILED, 0.1 % COMPENSATED, 2,000 PENDING, 100 stuck RUNNING, the rest
//       SUCCESS), serves it in-process, measures, drops the schema;
//   dsync_console_bench --url http://127.0.0.1:PORT/
//       measures a running `dsync serve` (e.g. the demo's) as it is.
// Prints one line per figure; also the EXPLAIN of the overview's statements with --db.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/StreamCopier.h>
#include <Poco/URI.h>

#include "api/event_store.h"
#include "api/http_server.h"
#include "events/status.h"
#include "storage/connection_pool.h"
#include "storage/migrator.h"
#include "tests/browser/chromium.h"

namespace {

using namespace dsync;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Measure(const std::string& base) {
  Poco::URI uri(base);
  std::vector<double> api_ms;
  size_t bytes = 0;
  for (int i = 0; i < 21; ++i) {
    Poco::Net::HTTPClientSession s(uri.getHost(), uri.getPort());
    Poco::Net::HTTPRequest req(Poco::Net::HTTPRequest::HTTP_GET, "/v1/overview", Poco::Net::HTTPMessage::HTTP_1_1);
    const auto t0 = Clock::now();
    s.sendRequest(req);
    Poco::Net::HTTPResponse resp;
    std::string body;
    Poco::StreamCopier::copyToString(s.receiveResponse(resp), body);
    api_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (resp.getStatus() != 200) throw std::runtime_error("overview answered " + std::to_string(resp.getStatus()));
    bytes = body.size();
  }
  std::cout << "GET /v1/overview: median " << Median(api_ms) << " ms, min " << *std::min_element(api_ms.begin(), api_ms.end())
            << " ms, max " << *std::max_element(api_ms.begin(), api_ms.end()) << " ms (21 calls, " << bytes << " bytes)\n";
  std::vector<double> page_ms;
  for (int i = 0; i < 5; ++i) {
    testing::Chromium b;  // fresh profile: nothing cached
    b.Navigate(base + "#/overview");
    if (!b.WaitFor("document.body.dataset.overviewMs", std::chrono::milliseconds(30000))) {
      throw std::runtime_error("the overview did not render");
    }
    page_ms.push_back(std::stod(b.Eval("document.body.dataset.overviewMs").get<std::string>()));
  }
  std::cout << "overview page, navigation start to first render (fresh browser): median " << Median(page_ms)
            << " ms, min " << *std::min_element(page_ms.begin(), page_ms.end()) << " ms, max "
            << *std::max_element(page_ms.begin(), page_ms.end()) << " ms (5 loads)\n";
}

void Fill(storage::ConnectionPool& pool, int64_t n) {
  constexpr int64_t kChunk = 100000;
  const auto t0 = Clock::now();
  pool.Run("fill", [&](storage::Connection& c) {
    c.ExecuteDdl("SET SESSION max_recursive_iterations = 1000000");
    for (int64_t start = 0; start < n; start += kChunk) {
      const int64_t count = std::min(kChunk, n - start);
      c.Execute(R"(
INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, status, phase, node_address,
                              create_time, started_time, finished_time, modifier_time, last_error)
SELECT CONCAT('t', k MOD 50), CONCAT('bench-', k), CONCAT('d', k), ELT(1 + k MOD 3, 'SPACE_ADD', 'DOC_SYNC', 'TAG_SYNC'),
  '{}', st, IF(st = )" DSYNC_SQL_STATUS(COMPENSATED) R"(, 'COMPENSATE', 'FORWARD'), IF(st = )" DSYNC_SQL_STATUS(PENDING) R"(, NULL, '10.0.0.1:7001'),
  NOW(3) - INTERVAL (? - k) SECOND, NOW(3) - INTERVAL (? - k) SECOND,
  IF(st IN )" DSYNC_SQL_TERMINAL R"(, NOW(3) - INTERVAL (? - k) SECOND, NULL),
  IF(st = )" DSYNC_SQL_STATUS(RUNNING) R"(, NOW(3) - INTERVAL 1 HOUR, NOW(3) - INTERVAL (? - k) SECOND),
  IF(st IN ()" DSYNC_SQL_STATUS(FAILED) R"(, )" DSYNC_SQL_STATUS(COMPENSATED) R"(), 'bench: injected failure', NULL)
FROM (SELECT k, CASE WHEN k > ? - 2000 THEN )" DSYNC_SQL_STATUS(PENDING) R"( WHEN k > ? - 2100 THEN )" DSYNC_SQL_STATUS(RUNNING) R"(
                     WHEN k MOD 1000 = 0 THEN )" DSYNC_SQL_STATUS(FAILED) R"( WHEN k MOD 1000 = 1 THEN )" DSYNC_SQL_STATUS(COMPENSATED) R"( ELSE )" DSYNC_SQL_STATUS(SUCCESS) R"( END AS st
      FROM (WITH RECURSIVE seq(k) AS (SELECT ? UNION ALL SELECT k + 1 FROM seq WHERE k < ?) SELECT k FROM seq) s) g)",
                n, n, n, n, n, n, start + 1, start + count);
    }
  });
  std::cout << "filled " << n << " events in "
            << std::chrono::duration<double>(Clock::now() - t0).count() << " s\n";
}

void Explain(storage::ConnectionPool& pool) {
  pool.Run("explain", [&](storage::Connection& c) {
    for (const char* q : {"SELECT status, COUNT(*) FROM distribute_event GROUP BY status",
                          "SELECT topic, status, COUNT(*) FROM distribute_event GROUP BY topic, status",
                          "SELECT code FROM distribute_event WHERE status = " DSYNC_SQL_STATUS(FAILED) " ORDER BY id DESC LIMIT 20",
                          "SELECT code FROM distribute_event WHERE status IN " DSYNC_SQL_IN_FLIGHT " "
                          "AND modifier_time < NOW(3) - INTERVAL 5 MINUTE ORDER BY id LIMIT 20",
                          "SELECT code FROM distribute_event e WHERE e.phase = 'COMPENSATE' AND e.status IN "
                          "(" DSYNC_SQL_STATUS(PENDING) ", " DSYNC_SQL_STATUS(ASSIGNED) ", " DSYNC_SQL_STATUS(COMPENSATING) ") LIMIT 20"}) {
      auto rs = c.Query(std::string("EXPLAIN ") + q);
      // storage::ResultSet reads by column number: find EXPLAIN's columns by label.
      auto column = [&](const std::string& label) {
        for (int i = 1; i <= rs->columnCount(); ++i) {
          if (rs->columnLabel(i) == label) return i;
        }
        throw std::runtime_error("EXPLAIN has no column " + label);
      };
      const int type = column("type"), key = column("key"), rows = column("rows"), extra = column("Extra");
      while (rs->next()) {
        std::cout << "  EXPLAIN " << std::string(q).substr(0, 60) << "... -> type=" << rs->getString(type)
                  << " key=" << rs->getString(key) << " rows=" << rs->getString(rows)
                  << " extra=" << rs->getString(extra) << "\n";
      }
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::string db, url;
  int64_t events = 1000000;
  bool keep = false;  // --keep 1: leave the schema for a look with the mariadb client
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--keep") keep = std::string(argv[i + 1]) == "1";
    if (key == "--db") db = argv[i + 1];
    else if (key == "--url") url = argv[i + 1];
    else if (key == "--events") events = std::stoll(argv[i + 1]);
  }
  if (db.empty() == url.empty()) {
    std::cerr << "usage: dsync_console_bench --db URL [--events N] | --url http://HOST:PORT/\n";
    return 2;
  }
  try {
    if (!url.empty()) {
      Measure(url);
      return 0;
    }
    storage::DbUrl server = storage::DbUrl::Parse(db);
    storage::DbUrl bench = server.WithSchema("console_bench");
    if (events > 0) {  // --events 0: measure the schema a --keep 1 run left
      storage::Connection admin(server);
      admin.ExecuteDdl("DROP DATABASE IF EXISTS console_bench");
      admin.ExecuteDdl("CREATE DATABASE console_bench");
    }
    {
      storage::ConnectionPool pool(bench);
      if (events > 0) {
        storage::Migrator(pool).Migrate();
        Fill(pool, events);
      }
      Explain(pool);
      api::StoreOptions options;
      options.service = "bench";
      api::EventStore store(pool, options);
      api::HttpOptions o;
      o.listen = "127.0.0.1:0";
      SystemClock clock;
      api::HttpServer server(store, o, clock);
      server.Start();
      Measure("http://127.0.0.1:" + std::to_string(server.port()) + "/");
      server.Stop();
    }
    if (!keep) storage::Connection(server).ExecuteDdl("DROP DATABASE IF EXISTS console_bench");
  } catch (const std::exception& e) {
    std::cerr << "console bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
