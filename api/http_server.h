// The HTTP API of `dsync serve` and `dsync all`: JSON in and out, a thin layer over
// api::EventStore (every rule about events lives there), plus /healthz and
// Prometheus /metrics.
//
//   metrics::Registry components;   // the metric writers of this process's components (app/)
//   components.Add([&](metrics::TextWriter& w) { storage::WriteMetrics(pool.stats(), w); });
//   api::HttpServer server(store, api::HttpOptionsFromSettings(settings.api), std::move(components));
//   server.Start();                 // binds; throws UsageError (bad listen) or Error (bind failed)
//   ... wait for SIGTERM ...
//   server.Stop();                  // ends streams, finishes requests, closes the socket
//
// Routes (JSON bodies; every error is `{"error": "<one line>"}`):
//   POST /v1/events                {code, topic, tenant_id, data_id, payload?, priority?,
//                                   delay_ms?, trace_id?} -> 201 + event, or 200 + the
//                                   existing event when the code exists (idempotent)
//   POST /v1/batches               {batch_code, events: [...], on_complete?: {topic, payload?,
//                                   tenant_id?}} -> 201 {batch_code, created, existing} (200 when
//                                   every code existed); one transaction; on_complete: one
//                                   completion event once all are terminal (events/batches.h)
//   GET  /v1/batches/{code}        progress: {batch_code, total, by_status, terminal, percent_done}
//   GET  /v1/events?topic=&status=&limit=&after=
//                                  {events: [...], next: "<cursor>" | null}, newest first;
//                                  `after` is the previous page's `next`
//   GET  /v1/events/{code}         the event with steps, timeline and process log
//   GET  /v1/events/{code}/stream  text/event-stream: `event: progress` + `data: {json}` on
//                                  every change (status, progress, steps done/total), `: ping`
//                                  comments while nothing changes, `event: end` at SUCCESS /
//                                  FAILED / COMPENSATED, then the stream closes
//   POST /v1/events/{code}/retry   {"from": "start" | "failed_step"} (body optional; default
//                                  failed_step) -> 200 + the event; 409 unless FAILED/COMPENSATED
//   POST /v1/events/{code}/cancel  {"reason": "..."} (body optional) -> 200 + the event, now
//                                  FAILED "cancelled: <reason>" (EventStore::Cancel); 409
//                                  unless not started (PENDING, or ASSIGNED to a dead node)
//   GET  /v1/events?...&batch=&tenant=&code=   also by batch code, tenant_id, code prefix
//   GET  /v1/nodes?all=true        {nodes: [...]} (live nodes; all rows with all=true)
//   POST /v1/nodes/{address}/drain the node drains (EventStore::Drain) -> 200 + the node;
//                                  404 unless it is live (no body)
//   GET  /v1/overview?topics=true  the console's overview (console::Overview); with
//                                  topics=true also the counts by topic and status
//   GET  /, /assets/{file}         the web console (api/console.h); no token needed,
//                                  the files hold no data
//   GET  /healthz                  200 when the database answers, else 503; lease state
//   GET  /metrics                  Prometheus text format 0.0.4: the database's families
//                                  (WriteDatabaseMetrics), the registered components'
//                                  writers in order, then the server's own (HttpStats)
//   POST /v1/verify                {topic, payload} or {source, target, table, where, params?},
//                                  max_keys? -> 200 {"equal", "tables": [...]}, the JSON of
//                                  `dsync verify --json` (api/verify_service.h); recorded in
//                                  dsync_verify_result; bad names/filters 400
//   GET  /v1/verify                {results: [...]}: v_verify_latest, newest first (the
//                                  console's Verify page)
//
// Rejections, all 4xx with a JSON message, and none writes anything:
//   401 a token is configured and the request lacks `Authorization: Bearer <token>`
//       (every route; compared in constant time; the token is never logged)
//   400 bad JSON, bad field, unknown field, unknown topic, junk query parameter
//   404 unknown route or code; 405 known route, other method (Allow header set)
//   409 retry of an event that is not FAILED or COMPENSATED
//   413 a body over max_body_bytes, by Content-Length or counted while reading (chunked)
//   415 a POST whose Content-Type is not application/json (so a web page cannot
//       submit to a local server with a plain form)
//   503 too many open streams
// A database failure answers 503 with a generic message (the detail, which may name
// the host and user, goes to the log only); anything unexpected 500.
//
// Thread safety: Start/Stop from one controlling thread; requests are served on
// `threads` threads of the server's own pool. Each open SSE stream holds one of
// them, so at most `max_streams` streams are open at once.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "api/console.h"
#include "api/event_store.h"
#include "api/verify_service.h"
#include "config/settings.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "storage/connection_pool.h"

namespace Poco {
class ThreadPool;
namespace Net {
class HTTPServer;
class HTTPServerRequest;
class HTTPServerResponse;
}  // namespace Net
}  // namespace Poco

namespace dsync::api {

struct HttpOptions {
  std::string listen = "127.0.0.1:8080";  // HOST:PORT ([v6]:PORT); port 0: any free port
  std::string token;                      // bearer token; empty: no authentication
  int64_t max_body_bytes = 1048576;       // larger request bodies are refused with 413
  int threads = 16;                       // connections served at once
  int max_streams = 0;                    // open SSE streams at most; 0: threads / 2
  Millis stream_poll_interval{200};       // how often a stream reads its event
  Millis stream_ping_interval{15000};     // `: ping` after this long without a message
  Millis socket_timeout{30000};           // a client silent this long mid-request is dropped
};

// listen, token and max_body_bytes from the config's `api` section.
HttpOptions HttpOptionsFromSettings(const ApiSettings& api);

// The routes, as the `route` label of the request metrics.
enum class Route {
  kCreateEvent, kListEvents, kGetEvent, kStreamEvent, kRetryEvent, kCreateBatch, kGetBatch,
  kNodes, kHealth, kMetrics, kDrainNode, kOverview, kConsole, kVerify, kCancelEvent, kUnknown,
};
inline constexpr size_t kRouteCount = static_cast<size_t>(Route::kUnknown) + 1;
const char* RouteName(Route r);  // "/v1/events/{code}", ...

struct HttpStats {
  metrics::LabeledCounter requests{{"route", "method", "code"}};
  std::array<metrics::Histogram, kRouteCount> duration;  // per route, seconds
  std::atomic<int> open_streams{0};
  std::atomic<uint64_t> rejected_streams{0};  // 503: max_streams reached
};

// The server's families of /metrics (dsync_http_*); api/http_metrics.cc.
void WriteMetrics(const HttpStats& stats, metrics::TextWriter& w);

class HttpServer {
 public:
  // `store` must outlive the server, and so must the components `components` reads
  // (their writers run on each scrape of /metrics). Does not bind until Start().
  HttpServer(EventStore& store, HttpOptions options, metrics::Registry components = {});
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving. Throws UsageError for a malformed listen address,
  // Error when the address cannot be bound (in use, not local). Once only.
  void Start();
  // Stops accepting, ends open streams, aborts idle keep-alive connections, and
  // waits for running requests. Idempotent.
  void Stop();

  // The bound port (the ephemeral one when listen asked for port 0); 0 before Start.
  uint16_t port() const { return port_; }
  HttpStats& stats() { return stats_; }

  // The /metrics text, for `dsync` tools and tests.
  std::string RenderMetrics();

  // Called by the request handler (internal).
  void Handle(Poco::Net::HTTPServerRequest& request, Poco::Net::HTTPServerResponse& response);

 private:
  struct Reply;
  struct Request;
  Reply Dispatch(Request& req, Poco::Net::HTTPServerRequest& raw,
                 Poco::Net::HTTPServerResponse& response, bool& streamed);
  Reply CreateEvent(const Request& req);
  Reply CreateBatch(const Request& req);
  Reply ListEvents(const Request& req);
  Reply RetryEvent(const Request& req, const std::string& code);
  Reply Nodes(const Request& req);
  Reply Health();
  Reply Verify(const Request& req);
  Reply ConsoleAsset(const Poco::Net::HTTPServerRequest& raw, std::string_view path);
  // Writes the whole stream itself; throws (before any byte is sent) like the others.
  void StreamEvent(const std::string& code, Poco::Net::HTTPServerResponse& response);
  // Waits up to `d`; false when the server is stopping.
  bool WaitFor(Millis d);

  EventStore& store_;
  const HttpOptions options_;
  const metrics::Registry components_;
  HttpStats stats_;
  SystemClock clock_;
  console::ThroughputHistory throughput_{clock_};
  uint16_t port_ = 0;

  std::mutex mu_;
  std::condition_variable stop_cv_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  std::unique_ptr<Poco::ThreadPool> threads_;
  std::unique_ptr<Poco::Net::HTTPServer> server_;
  std::mutex verify_mu_;
  std::unique_ptr<VerifyService> verify_;  // created on the first POST /v1/verify
};

}  // namespace dsync::api
