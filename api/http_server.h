// The HTTP API of `dsync serve` and `dsync all`: JSON in and out, a thin layer over
// api::EventStore (every rule about events lives there), plus /healthz and
// Prometheus /metrics.
//
//   metrics::Registry components;   // the metric writers of this process's components (app/)
//   components.Add([&](metrics::TextWriter& w) { storage::WriteMetrics(pool.stats(), w); });
//   api::HttpServer server(store, app::HttpOptionsFrom(settings), clock, std::move(components));  // app/options.h
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
//   POST /v1/verify                {topic, payload?, max_keys?} (configured topics only;
//                                  one table is the CLI's) -> 200 {"equal", "tables": [...]},
//                                  the JSON of `dsync verify --json` (api/verify_service.h);
//                                  recorded in dsync_verify_result; bad names/filters 400
//   GET  /v1/verify                {results: [...]}: v_verify_latest, newest first (the
//                                  console's Verify page)
//   GET  /v1/topics                {topics: [{topic, configured, pending, paused, pause:
//                                  {paused_by, paused_at, reason} | null}]} (api/control_store.h)
//   POST /v1/topics/{topic}/pause  {"reason"?, "by"?} (body optional; by defaults to "api")
//                                  -> 200 {topic, paused: true, created, pause}; the dispatcher
//                                  assigns none of the topic's events until it is resumed
//   POST /v1/topics/{topic}/resume (no body) -> 200 {topic, paused: false, was_paused, ended}
//   GET  /v1/schedules             {schedules: [{name, cron, timezone, topic, missed,
//                                  configured, next_tick, next_tick_source, last_tick,
//                                  last_event_code, last_run_at, skipped_ticks}]}
//
// Rejections, all 4xx with a JSON message, and none writes anything. Those marked * are
// decided from the request head alone, before any body is read; when a body was
// announced the connection then closes without reading it (api/http_connections.h):
//   421* the Host header names a host not allowed (api.allowed_hosts; DNS rebinding):
//       without a token and without allowed_hosts only loopback names and the listen
//       host are answered, with a token any unless allowed_hosts is given
//   401* a token is configured and the request lacks `Authorization: Bearer <token>`
//       (every route but the console's files; compared in constant time; never logged)
//   400 bad JSON, bad field, unknown field, unknown topic, junk query parameter*,
//       a body on a GET*, a malformed request*
//   404* unknown route; 404 unknown code; 405* known route, other method (Allow set)
//   408* the head or the body took longer than its deadline
//   409 retry of an event that is not FAILED or COMPENSATED
//   411* a POST without Content-Length that is not chunked
//   413* a body over max_body_bytes, by Content-Length or counted while reading (chunked)
//   415* a POST whose Content-Type is not application/json (so a web page cannot
//       submit to a local server with a plain form)
//   503 too many open streams, or too many requests waiting for a worker
// A database failure answers 503 with a generic message (the detail, which may name
// the host and user, goes to the log only); anything unexpected 500. Without a token,
// nothing answered names a database host, port, user or schema: a node's
// `datasource_errors` (GET /v1/nodes, the overview) show the datasource and a class
// ("unreachable", "access denied", "unknown database") only, and the error texts of
// events, steps, process logs and verify results are masked (MaskEndpoints).
//
// Thread safety: Start/Stop from one controlling thread; requests are read by one I/O
// thread and answered on `threads` workers (api/http_connections.h). Each open SSE
// stream holds a worker, so at most `max_streams` (threads / 2) streams are open.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/console.h"
#include "api/control_store.h"
#include "api/event_store.h"
#include "api/http_connections.h"
#include "api/verify_service.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "storage/connection_pool.h"

namespace dsync::api {

// The server's options, built from the settings by app/options.h HttpOptionsFrom
// (the fields without a config key keep their defaults there).
struct HttpOptions {
  std::string listen = "127.0.0.1:8080";  // api.listen (--listen): HOST:PORT ([v6]:PORT); port 0: any free port. Default 127.0.0.1:8080
  std::string token;                      // api.token: bearer token; empty: no authentication. Default ""
  std::vector<std::string> allowed_hosts; // api.allowed_hosts: Host names answered ("*": any); empty: see above. Default []
  int max_streams = 0;                    // open SSE streams at most; 0: connection.threads / 2. Default 0
  Millis stream_poll_interval{200};       // how often a stream reads its event. Default 200 ms
  Millis stream_ping_interval{15000};     // `: ping` after this long without a message. Default 15 s
  // Workers, body and connection limits, per-phase deadlines (api/http_connections.h);
  // connection.max_body_bytes is api.max_body_bytes (default 1 MiB).
  HttpConnectionOptions connection;
};

// The routes, as the `route` label of the request metrics.
enum class Route {
  kCreateEvent, kListEvents, kGetEvent, kStreamEvent, kRetryEvent, kCreateBatch, kGetBatch,
  kNodes, kHealth, kMetrics, kDrainNode, kOverview, kConsole, kVerify, kCancelEvent,
  kTopics, kPauseTopic, kResumeTopic, kSchedules,  // issue 37
  kCaptures,                                        // issue 36
  kUnknown,
};
inline constexpr size_t kRouteCount = static_cast<size_t>(Route::kUnknown) + 1;
const char* RouteName(Route r);  // "/v1/events/{code}", ...

struct HttpStats {
  metrics::LabeledCounter requests{{"route", "method", "code"}};
  std::array<metrics::Histogram, kRouteCount> duration;  // per route, seconds
  std::atomic<int> open_streams{0};
  std::atomic<uint64_t> rejected_streams{0};  // 503: max_streams reached
  HttpConnectionStats connections;
};

// The server's families of /metrics (dsync_http_*); api/http_metrics.cc.
void WriteMetrics(const HttpStats& stats, metrics::TextWriter& w);

class HttpServer final : private HttpService {
 public:
  // `store` and `clock` must outlive the server, and so must the components
  // `components` reads (their writers run on each scrape of /metrics). `clock` times
  // the connections' phase deadlines (api/http_connections.h), requests, streams and
  // the console's throughput history. Does not bind until Start().
  HttpServer(EventStore& store, HttpOptions options, Clock& clock, metrics::Registry components = {});
  ~HttpServer() override;  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving. Throws UsageError for a malformed listen address,
  // Error when the address cannot be bound (in use, not local). Once only.
  void Start();
  // Stops accepting, ends open streams, closes idle connections, and waits for
  // running requests. Idempotent.
  void Stop();

  // The bound port (the ephemeral one when listen asked for port 0); 0 before Start.
  uint16_t port() const { return port_; }
  HttpStats& stats() { return stats_; }

  // The /metrics text, for `dsync` tools and tests.
  std::string RenderMetrics();

 private:
  struct Request;
  struct RouteSpec;
  using Reply = HttpReply;
  static const std::vector<RouteSpec>& Routes();

  // HttpService
  std::optional<HttpReply> Screen(const HttpRequestHead& head) override;
  void Serve(HttpRequest& request, HttpResponder& out) override;
  void Refused(const HttpRequestHead* head, int status) override;

  // Everything decided from the head (Host, route, token, method, code, query, media
  // type). Throws HttpError / UsageError.
  void Prepare(const HttpRequestHead& head, Request& req) const;
  bool HostAllowed(const HttpRequestHead& head) const;
  // JSON text of an answer; without a token its error texts are redacted (see above).
  std::string PublicDump(nlohmann::json j) const;
  // The answer for an exception thrown while preparing or handling `req`.
  Reply ErrorReply(const Request& req) const;

  Reply CreateEvent(Request& req);
  Reply CreateBatch(Request& req);
  Reply ListEvents(Request& req);
  Reply GetEvent(Request& req);
  Reply GetBatch(Request& req);
  Reply RetryEvent(Request& req);
  Reply CancelEvent(Request& req);
  Reply Nodes(Request& req);
  Reply DrainNode(Request& req);
  Reply Overview(Request& req);
  Reply Health(Request& req);
  Reply Metrics(Request& req);
  Reply Verify(Request& req);
  Reply VerifyResults(Request& req);
  Reply ConsoleAsset(Request& req);
  // issue 37: pauses and schedules (api/control_store.h).
  Reply Topics(Request& req);
  Reply Captures(Request& req);  // issue 36: capture::CaptureStore::ListJson
  Reply PauseTopic(Request& req);
  Reply ResumeTopic(Request& req);
  Reply Schedules(Request& req);
  // Writes the whole stream itself; throws (before any byte is sent) like the others.
  Reply StreamEvent(Request& req);
  // Waits up to `d`; false when the server is stopping.
  bool WaitFor(Millis d);

  EventStore& store_;
  const HttpOptions options_;
  const metrics::Registry components_;
  HttpStats stats_;
  Clock& clock_;
  console::ThroughputHistory throughput_{clock_};
  ControlStore control_{store_.pool(), store_.options(), clock_};  // issue 37
  uint16_t port_ = 0;
  std::vector<std::string> allowed_hosts_;  // lower-case; empty: any

  std::mutex mu_;
  std::condition_variable stop_cv_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  std::unique_ptr<HttpConnections> connections_;
  std::mutex verify_mu_;
  std::unique_ptr<VerifyService> verify_;  // created on the first POST /v1/verify
};

}  // namespace dsync::api
