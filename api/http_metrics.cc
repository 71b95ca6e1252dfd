// api::WriteMetrics(HttpStats): the HTTP server's families of /metrics.
#include "api/http_server.h"

namespace dsync::api {

void WriteMetrics(const HttpStats& stats, metrics::TextWriter& w) {
  using metrics::Type;
  w.Family("dsync_http_requests_total", "HTTP requests served, by route, method and status code.", Type::kCounter);
  for (const auto& [labels, n] : stats.requests.snapshot()) {
    w.Sample("dsync_http_requests_total", labels, static_cast<double>(n));
  }
  w.Family("dsync_http_request_duration_seconds", "HTTP request handling time by route (streams: their lifetime).",
           Type::kHistogram);
  for (size_t r = 0; r < kRouteCount; ++r) {
    // kCreateEvent and kListEvents share the path; tell them apart by method.
    const Route route = static_cast<Route>(r);
    metrics::Labels labels{{"route", RouteName(route)}};
    if (route == Route::kCreateEvent) labels.emplace_back("method", "POST");
    else if (route == Route::kListEvents) labels.emplace_back("method", "GET");
    else labels.emplace_back("method", "any");
    w.Histogram("dsync_http_request_duration_seconds", labels, stats.duration[r].snapshot());
  }
  w.Family("dsync_http_open_streams", "Open server-sent-event streams.", Type::kGauge);
  w.Sample("dsync_http_open_streams", {}, stats.open_streams.load());
  const HttpConnectionStats& c = stats.connections;
  w.Family("dsync_http_connections", "Open client connections.", Type::kGauge);
  w.Sample("dsync_http_connections", {}, c.open.load());
  w.Family("dsync_http_connections_accepted_total", "Client connections accepted.", Type::kCounter);
  w.Sample("dsync_http_connections_accepted_total", {}, static_cast<double>(c.accepted.load()));
  w.Family("dsync_http_connections_timed_out_total",
           "Connections closed by a deadline, by phase: idle (no request), head (request line and headers), body.",
           Type::kCounter);
  w.Sample("dsync_http_connections_timed_out_total", {{"phase", "idle"}}, static_cast<double>(c.timed_out_idle.load()));
  w.Sample("dsync_http_connections_timed_out_total", {{"phase", "head"}}, static_cast<double>(c.timed_out_head.load()));
  w.Sample("dsync_http_connections_timed_out_total", {{"phase", "body"}}, static_cast<double>(c.timed_out_body.load()));
  w.Family("dsync_http_connections_evicted_total", "Connections closed to make room (max_connections).",
           Type::kCounter);
  w.Sample("dsync_http_connections_evicted_total", {}, static_cast<double>(c.evicted.load()));
}

}  // namespace dsync::api
