// The HTTP API: the route table, the checks made on a request's head (Host, token,
// route, method, query, media type), the handlers, event streams. How connections are
// read and answered is api/http_connections.cc.
#include "api/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "api/http_text.h"
#include "capture/capture_store.h"
#include "core/error.h"
#include "events/status.h"

namespace dsync::api {

// One route: a method and a path pattern ("{code}" matches one non-empty segment, its
// percent-decoded text becomes Request::code), the query parameters it takes (each at
// most once), and its handler. Routes sharing a pattern share the 405's Allow header,
// in table order.
struct HttpServer::RouteSpec {
  Route route;
  std::string_view method;
  std::string_view pattern;
  std::vector<std::string> query_keys;
  Reply (HttpServer::*handler)(Request&);
};

struct HttpServer::Request {
  const HttpRequestHead* head = nullptr;
  std::string method;
  Route route = Route::kUnknown;
  const RouteSpec* spec = nullptr;  // null: the console's files
  std::string path;                 // as sent (percent-encoded)
  std::string code;                 // the {code} / {address} segment, percent-decoded
  std::vector<std::pair<std::string, std::string>> query;
  std::string body;
  HttpResponder* out = nullptr;     // Serve only
  bool streamed = false;            // the handler wrote the answer itself
};

const std::vector<HttpServer::RouteSpec>& HttpServer::Routes() {
  static const std::vector<RouteSpec> kRoutes = {
      {Route::kHealth, "GET", "/healthz", {}, &HttpServer::Health},
      {Route::kMetrics, "GET", "/metrics", {}, &HttpServer::Metrics},
      {Route::kNodes, "GET", "/v1/nodes", {"all"}, &HttpServer::Nodes},
      {Route::kDrainNode, "POST", "/v1/nodes/{address}/drain", {}, &HttpServer::DrainNode},
      {Route::kOverview, "GET", "/v1/overview", {"topics"}, &HttpServer::Overview},
      {Route::kVerify, "GET", "/v1/verify", {}, &HttpServer::VerifyResults},
      {Route::kVerify, "POST", "/v1/verify", {}, &HttpServer::Verify},
      {Route::kListEvents, "GET", "/v1/events", {"topic", "status", "limit", "after", "batch", "tenant", "code"},
       &HttpServer::ListEvents},
      {Route::kCreateEvent, "POST", "/v1/events", {}, &HttpServer::CreateEvent},
      {Route::kCreateBatch, "POST", "/v1/batches", {}, &HttpServer::CreateBatch},
      {Route::kGetBatch, "GET", "/v1/batches/{code}", {}, &HttpServer::GetBatch},
      {Route::kGetEvent, "GET", "/v1/events/{code}", {}, &HttpServer::GetEvent},
      {Route::kStreamEvent, "GET", "/v1/events/{code}/stream", {}, &HttpServer::StreamEvent},
      {Route::kRetryEvent, "POST", "/v1/events/{code}/retry", {}, &HttpServer::RetryEvent},
      {Route::kCancelEvent, "POST", "/v1/events/{code}/cancel", {}, &HttpServer::CancelEvent},
      // issue 37: pauses and schedules
      {Route::kTopics, "GET", "/v1/topics", {}, &HttpServer::Topics},
      {Route::kPauseTopic, "POST", "/v1/topics/{topic}/pause", {}, &HttpServer::PauseTopic},
      {Route::kResumeTopic, "POST", "/v1/topics/{topic}/resume", {}, &HttpServer::ResumeTopic},
      {Route::kSchedules, "GET", "/v1/schedules", {}, &HttpServer::Schedules},
      {Route::kCaptures, "GET", "/v1/captures", {}, &HttpServer::Captures},
  };
  return kRoutes;
}

namespace {

using nlohmann::json;
// The progress document a stream sends.
json Progress(const EventDetail& d) {
  int done = 0, compensated = 0;
  for (const auto& s : d.steps) {
    if (s.status == events::ToText(events::StepStatus::kSuccess)) ++done;
    if (s.status == events::ToText(events::StepStatus::kCompensated)) ++compensated;
  }
  const EventRow& e = d.event;
  return {{"code", e.code},
          {"status", e.status},
          {"phase", e.phase},
          {"progress", e.progress ? json(*e.progress) : json(nullptr)},
          {"steps_done", done},
          {"steps_compensated", compensated},
          {"steps_total", d.steps.size()},
          {"retry_count", e.retry_count},
          {"node_address", e.node_address.empty() ? json(nullptr) : json(e.node_address)},
          {"last_error", e.last_error.empty() ? json(nullptr) : json(e.last_error)}};
}

// "/a/b" -> {"a", "b"}; "/" -> {""}.
std::vector<std::string_view> PathSegments(std::string_view path) {
  std::vector<std::string_view> s = Split(path, '/');
  if (!s.empty() && s.front().empty()) s.erase(s.begin());
  return s;
}

// Does `path` fit `pattern`? `param` gets the segment a "{...}" matched.
bool Matches(std::string_view pattern, const std::vector<std::string_view>& path, std::string_view* param) {
  const std::vector<std::string_view> p = PathSegments(pattern);
  if (p.size() != path.size()) return false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].starts_with('{')) {
      if (path[i].empty()) return false;
      if (param != nullptr) *param = path[i];
    } else if (p[i] != path[i]) {
      return false;
    }
  }
  return true;
}

// The name of a Host header value without its port, lower-case: "LocalHost:8080" ->
// "localhost", "[::1]:80" -> "[::1]".
std::string HostName(std::string_view host) {
  std::string_view name = host;
  if (name.starts_with('[')) {
    const size_t close = name.find(']');
    name = close == std::string_view::npos ? name : name.substr(0, close + 1);
  } else if (const size_t colon = name.rfind(':'); colon != std::string_view::npos) {
    name = name.substr(0, colon);
  }
  std::string out(name);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (out.size() > 1 && out.back() == '.') out.pop_back();  // "localhost." is "localhost"
  return out;
}

// The class of a datasource check's failure, without the host, port, user or schema
// its text names (shown to clients without the token).
std::string ErrorClass(const std::string& text) {
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("access denied") != std::string::npos) return "access denied";
  if (lower.find("unknown database") != std::string::npos) return "unknown database";
  return "unreachable";
}

// What a client without the token sees of an answer: a node's datasource_errors keep
// the datasource and the class of the failure; every other error text (keys holding
// "error", "why", "reason", "message", the whole process log) is masked
// (MaskEndpoints). Payloads are the producer's data and stay as stored.
void Redact(json& j, bool error_text = false) {
  if (j.is_object()) {
    for (auto& [key, value] : j.items()) {
      if (key == "payload") continue;
      if (key == "datasource_errors" && value.is_object()) {
        for (auto& [name, text] : value.items()) {
          if (text.is_string()) text = ErrorClass(text.get<std::string>()) + " (details in the node's log)";
        }
        continue;
      }
      const bool error_key = error_text || key == "process_log" || key.find("error") != std::string::npos ||
                             key == "why" || key == "reason" || key == "message";
      if (value.is_string()) {
        if (error_key) value = MaskEndpoints(value.get<std::string>());
      } else {
        Redact(value, error_key);
      }
    }
  } else if (j.is_array()) {
    for (auto& v : j) Redact(v, error_text);
  } else if (j.is_string() && error_text) {
    j = MaskEndpoints(j.get<std::string>());
  }
}

}  // namespace

const char* RouteName(Route r) {
  switch (r) {
    case Route::kCreateEvent: return "/v1/events";
    case Route::kListEvents: return "/v1/events";
    case Route::kGetEvent: return "/v1/events/{code}";
    case Route::kStreamEvent: return "/v1/events/{code}/stream";
    case Route::kRetryEvent: return "/v1/events/{code}/retry";
    case Route::kCreateBatch: return "/v1/batches";
    case Route::kGetBatch: return "/v1/batches/{code}";
    case Route::kNodes: return "/v1/nodes";
    case Route::kHealth: return "/healthz";
    case Route::kMetrics: return "/metrics";
    case Route::kDrainNode: return "/v1/nodes/{address}/drain";
    case Route::kOverview: return "/v1/overview";
    case Route::kConsole: return "/ (console)";
    case Route::kVerify: return "/v1/verify";
    case Route::kCancelEvent: return "/v1/events/{code}/cancel";
    case Route::kTopics: return "/v1/topics";
    case Route::kPauseTopic: return "/v1/topics/{topic}/pause";
    case Route::kResumeTopic: return "/v1/topics/{topic}/resume";
    case Route::kSchedules: return "/v1/schedules";
    case Route::kCaptures: return "/v1/captures";
    case Route::kUnknown: return "other";
  }
  return "other";
}

HttpServer::HttpServer(EventStore& store, HttpOptions options, Clock& clock, metrics::Registry components)
    : store_(store), options_(std::move(options)), components_(std::move(components)), clock_(clock) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Start() {
  std::lock_guard lock(mu_);
  if (started_) throw std::logic_error("HttpServer::Start called twice");
  if (options_.connection.threads < 1) throw UsageError("api: threads must be at least 1");
  if (options_.connection.max_body_bytes < 1) throw UsageError("api.max_body_bytes must be at least 1");

  // HOST:PORT or [V6]:PORT.
  const std::string& listen = options_.listen;
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || port.empty() || port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoi(port) > 65535) {
    throw UsageError("api.listen: '" + listen + "' is not HOST:PORT");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0 || found == nullptr) {
    throw UsageError("api.listen: '" + listen + "' is not HOST:PORT (" + ::gai_strerror(rc) + ")");
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses(found, &::freeaddrinfo);
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd < 0) throw Error("api.listen: cannot listen on " + listen + ": " + std::strerror(errno));
  // SO_REUSEADDR (restart while old connections linger) but not SO_REUSEPORT, which
  // would let a second server share the port silently.
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0 || ::listen(fd, 512) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw Error("api.listen: cannot listen on " + listen + ": " + why);
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  // The Host allow-list (DNS rebinding): what the config names; else, without a token,
  // the loopback names and the listen host; else (a token) any.
  if (!options_.allowed_hosts.empty()) {
    for (const auto& h : options_.allowed_hosts) {
      if (h == "*") {
        allowed_hosts_.clear();
        break;
      }
      allowed_hosts_.push_back(HostName(h));
    }
  } else if (options_.token.empty()) {
    allowed_hosts_ = {"localhost", "127.0.0.1", "[::1]"};
    const std::string listen_host = HostName(listen);
    if (listen_host != "0.0.0.0" && listen_host != "[::]" &&
        std::find(allowed_hosts_.begin(), allowed_hosts_.end(), listen_host) == allowed_hosts_.end()) {
      allowed_hosts_.push_back(listen_host);
    }
  }

  HttpService& service = *this;
  connections_ = std::make_unique<HttpConnections>(service, options_.connection, stats_.connections, clock_);
  connections_->Start(fd);
  started_ = true;
  std::string hosts;
  for (const auto& h : allowed_hosts_) hosts += (hosts.empty() ? "" : ",") + h;
  spdlog::info("HTTP_LISTENING listen={} port={} auth={} allowed_hosts={} max_body_bytes={} threads={}",
               options_.listen, port_, options_.token.empty() ? "none" : "bearer", hosts.empty() ? "*" : hosts,
               options_.connection.max_body_bytes, options_.connection.threads);
}

void HttpServer::Stop() {
  std::unique_ptr<HttpConnections> connections;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    connections = std::move(connections_);
  }
  stop_cv_.notify_all();  // streams end
  if (!connections) return;
  connections->Stop();    // closes the socket and idle connections; running requests finish
  connections.reset();
  spdlog::info("HTTP_STOPPED port={}", port_);
}

bool HttpServer::WaitFor(Millis d) {
  std::unique_lock lock(mu_);
  return !stop_cv_.wait_for(lock, d, [this] { return stopping_.load(); });
}

bool HttpServer::HostAllowed(const HttpRequestHead& head) const {
  if (allowed_hosts_.empty()) return true;
  const std::string* host = head.Find("Host");
  // HTTP/1.0 clients may send none; a browser always does, so no page can rebind one.
  if (host == nullptr) return head.minor_version == 0;
  const std::string name = HostName(*host);
  return std::find(allowed_hosts_.begin(), allowed_hosts_.end(), name) != allowed_hosts_.end();
}

void HttpServer::Prepare(const HttpRequestHead& head, Request& req) const {
  req.head = &head;
  req.method = head.method;
  if (!HostAllowed(head)) {
    throw HttpError(421, "the Host header names a host this server does not answer for (api.allowed_hosts)");
  }
  const size_t qpos = head.target.find('?');
  req.path = head.target.substr(0, qpos);
  const std::string_view raw_query =
      qpos == std::string::npos ? std::string_view() : std::string_view(head.target).substr(qpos + 1);

  // Route (no side effects yet).
  const std::vector<std::string_view> segments = PathSegments(req.path);
  std::string allow;
  std::string_view param;
  for (const RouteSpec& r : Routes()) {
    std::string_view p;
    if (!Matches(r.pattern, segments, &p)) continue;
    if (allow.find(r.method) == std::string::npos) allow += (allow.empty() ? "" : ", ") + std::string(r.method);
    if (r.method == req.method && req.spec == nullptr) {
      req.spec = &r;
      req.route = r.route;
      param = p;
    }
  }
  const bool console_file = allow.empty() && console::FindAsset(req.path) != nullptr;
  if (console_file) allow = "GET";

  // Authentication comes before anything that tells the client about the server (the
  // console's files tell nothing: they hold no data).
  if (!options_.token.empty() && !console_file) {
    bool ok = false;
    if (const std::string* header = head.Find("Authorization")) {
      const size_t space = header->find(' ');
      if (space != std::string::npos && IEquals(std::string_view(*header).substr(0, space), "Bearer")) {
        ok = ConstantTimeEquals(options_.token, std::string(Trim(std::string_view(*header).substr(space + 1))));
      }
    }
    if (!ok) throw HttpError(401, "missing or wrong bearer token (Authorization: Bearer <api.token>)");
  }
  if (allow.empty()) throw HttpError(404, "no such route");
  if (console_file && req.method == "GET") req.route = Route::kConsole;
  if (req.route == Route::kUnknown) {
    throw HttpError(405, "method " + std::string(MethodLabel(req.method)) + " is not allowed here (allowed: " + allow + ")",
                    allow);
  }
  if (!param.empty()) {
    req.code = PercentDecode(param, /*plus_as_space=*/false);
    // No stored code can hold these; the database is not asked about them.
    if (!IsCleanText(req.code)) throw UsageError("the code in the path is not valid UTF-8 text without control characters");
  }

  // Query parameters: each route takes a fixed set, each at most once.
  static const std::vector<std::string> kNone;
  const std::vector<std::string>& keys = req.spec != nullptr ? req.spec->query_keys : kNone;
  for (std::string_view pair : Split(raw_query, '&')) {
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::string key = PercentDecode(pair.substr(0, eq), true);
    std::string value = eq == std::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1), true);
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::string known;
      for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
      throw UsageError("unknown query parameter (" + (known.empty() ? "this route takes none" : "known: " + known) + ")");
    }
    for (const auto& [k, _] : req.query) {
      if (k == key) throw UsageError("query parameter '" + key + "' is given twice");
    }
    req.query.emplace_back(std::move(key), std::move(value));
  }

  // The body: POST routes take JSON; other methods none.
  if (req.method == "POST") {
    const std::string* type = head.Find("Content-Type");
    const std::string_view media = type == nullptr ? "" : Trim(std::string_view(*type).substr(0, type->find(';')));
    if (!IEquals(media, "application/json")) throw HttpError(415, "Content-Type must be application/json");
  } else if (head.has_body()) {
    throw UsageError("a " + std::string(MethodLabel(req.method)) + " request takes no body");
  }
}

HttpServer::Reply HttpServer::ErrorReply(const Request& req) const {
  try {
    throw;
  } catch (const HttpError& e) {
    Reply reply{e.status, ErrorBody(e.what())};
    if (e.status == 401) reply.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"dsync\"");
    if (e.status == 405) reply.headers.emplace_back("Allow", e.allow);
    return reply;
  } catch (const UsageError& e) {
    return {400, ErrorBody(e.what())};
  } catch (const NotFoundError& e) {
    return {404, ErrorBody(e.what())};
  } catch (const ConflictError& e) {
    return {409, ErrorBody(e.what())};
  } catch (const SchemaError& e) {
    spdlog::warn("HTTP_SCHEMA_ERROR route={} err={}", RouteName(req.route), e.what());
    return {503, ErrorBody(options_.token.empty() ? MaskEndpoints(e.what()) : std::string(e.what()))};
  } catch (const DbError& e) {
    // The detail may name the database host and user: the log gets it, the client not.
    spdlog::warn("HTTP_DB_ERROR route={} err={}", RouteName(req.route), e.what());
    return {503, ErrorBody(e.kind() == DbError::Kind::kPoolExhausted ? "the database is busy; try again later"
                                                                      : "the database is unavailable; try again later")};
  } catch (const std::exception& e) {
    spdlog::error("HTTP_INTERNAL_ERROR route={} err={}", RouteName(req.route), e.what());
    return {500, ErrorBody("internal error")};
  }
}

std::optional<HttpReply> HttpServer::Screen(const HttpRequestHead& head) {
  Request req;
  try {
    Prepare(head, req);
    return std::nullopt;
  } catch (...) {
    Reply reply = ErrorReply(req);
    stats_.requests.Increment({RouteName(req.route), MethodLabel(req.method), std::to_string(reply.status)});
    if (reply.status == 421) {
      spdlog::warn("HTTP_HOST_REFUSED method={} route={}", MethodLabel(req.method), RouteName(req.route));
    }
    return reply;
  }
}

void HttpServer::Refused(const HttpRequestHead* head, int status) {
  Route route = Route::kUnknown;
  if (head != nullptr) {
    const std::vector<std::string_view> segments = PathSegments(std::string_view(head->target).substr(0, head->target.find('?')));
    for (const RouteSpec& r : Routes()) {
      if (r.method == head->method && Matches(r.pattern, segments, nullptr)) route = r.route;
    }
  }
  stats_.requests.Increment({RouteName(route), head != nullptr ? MethodLabel(head->method) : "other", std::to_string(status)});
}

void HttpServer::Serve(HttpRequest& request, HttpResponder& out) {
  const auto started = clock_.Now();
  Request req;
  req.out = &out;
  Reply reply;
  try {
    Prepare(request.head, req);  // as Screen did: it cannot fail now but is cheap
    req.body = std::move(request.body);
    reply = req.route == Route::kConsole ? ConsoleAsset(req) : (this->*(req.spec->handler))(req);
  } catch (...) {
    reply = ErrorReply(req);
  }
  int status = reply.status;
  if (req.streamed || out.started()) {
    status = 200;  // a stream: its headers went out; an error after that ends it early
  } else {
    reply.headers.emplace_back("Cache-Control", "no-store");
    reply.headers.emplace_back("X-Content-Type-Options", "nosniff");
    if (!out.Send(reply)) spdlog::debug("HTTP_SEND_FAILED route={}", RouteName(req.route));
  }
  const double seconds = std::chrono::duration<double>(clock_.Now() - started).count();
  stats_.requests.Increment({RouteName(req.route), MethodLabel(req.method), std::to_string(status)});
  stats_.duration[static_cast<size_t>(req.route)].Observe(seconds);
  spdlog::debug("HTTP_REQUEST method={} route={} status={} ms={:.1f}", MethodLabel(req.method), RouteName(req.route),
                status, seconds * 1000);
}

std::string HttpServer::PublicDump(json j) const {
  if (options_.token.empty()) Redact(j);
  return Dump(j);
}

HttpServer::Reply HttpServer::GetEvent(Request& req) { return {200, PublicDump(ToJson(store_.Get(req.code)))}; }

HttpServer::Reply HttpServer::GetBatch(Request& req) { return {200, PublicDump(ToJson(store_.GetBatch(req.code)))}; }

HttpServer::Reply HttpServer::Metrics(Request&) {
  return {200, RenderMetrics(), "text/plain; version=0.0.4; charset=utf-8"};
}

HttpServer::Reply HttpServer::DrainNode(Request& req) {
  if (!req.body.empty()) throw UsageError("a drain takes no body");
  return {200, PublicDump(ToJson(store_.Drain(req.code)))};
}

HttpServer::Reply HttpServer::Overview(Request& req) {
  bool by_topic = false;
  for (const auto& [key, value] : req.query) {
    if (value == "true" || value == "1") by_topic = true;
    else if (value != "false" && value != "0") throw UsageError(key + " must be true or false");
  }
  return {200, PublicDump(console::Overview(store_, throughput_, by_topic))};
}

HttpServer::Reply HttpServer::VerifyResults(Request&) {
  // The latest result per (topic or table, filter, table, target).
  json results = json::array();
  for (const auto& v : ReadLatestVerify(store_.pool())) results.push_back(v.ToJson());
  return {200, PublicDump(json{{"results", results}})};
}

HttpServer::Reply HttpServer::Verify(Request& req) {
  VerifyRequest r = ParseApiVerifyRequest(ParseJsonBody(req.body));
  VerifyService* service;
  {
    std::lock_guard lock(verify_mu_);
    if (!verify_) verify_ = std::make_unique<VerifyService>(store_.options(), &store_.pool(), clock_);
    service = verify_.get();
  }
  VerifyReport report = service->Run(r);
  service->Record(r, report);
  return {200, Dump(report.ToJson(r.max_keys))};
}

HttpServer::Reply HttpServer::CreateEvent(Request& req) {
  NewEvent e = ParseNewEvent(ParseJsonBody(req.body));
  ProduceResult r = store_.Produce(e);
  Reply reply{r.created ? 201 : 200, PublicDump(ToJson(r.event))};
  reply.headers.emplace_back("Location", "/v1/events/" + PercentEncode(r.event.code));
  return reply;
}

HttpServer::Reply HttpServer::CreateBatch(Request& req) {
  json body = ParseJsonBody(req.body);
  if (!body.is_object()) throw UsageError("the batch must be a JSON object {batch_code, events}");
  for (const auto& [key, _] : body.items()) {
    if (key != "batch_code" && key != "events" && key != "on_complete") {
      throw UsageError("unknown field (expected batch_code, events, on_complete)");
    }
  }
  std::optional<OnComplete> on_complete;
  if (auto oc = body.find("on_complete"); oc != body.end() && !oc->is_null()) on_complete = ParseOnComplete(*oc);
  auto code = body.find("batch_code");
  if (code == body.end() || !code->is_string()) throw UsageError("batch_code must be a string");
  auto list = body.find("events");
  if (list == body.end() || !list->is_array()) throw UsageError("events must be an array of events");
  std::vector<NewEvent> events;
  events.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    try {
      events.push_back(ParseNewEvent((*list)[i]));
    } catch (const UsageError& e) {
      throw UsageError("events[" + std::to_string(i) + "]: " + e.what());
    }
  }
  BatchResult r = store_.ProduceBatch(code->get<std::string>(), std::move(events), on_complete);
  return {r.created > 0 ? 201 : 200,
          Dump(json{{"batch_code", r.batch_code}, {"created", r.created}, {"existing", r.existing}})};
}

HttpServer::Reply HttpServer::ListEvents(Request& req) {
  EventFilter f;
  for (const auto& [key, value] : req.query) {
    if (key == "topic") f.topic = value;
    else if (key == "status") f.status = value;
    else if (key == "limit") f.limit = static_cast<int>(ParseCount("limit", value, 4));
    else if (key == "after") f.after = ParseCount("after", value, 18);
    else if (key == "batch") f.batch_code = value;
    else if (key == "tenant") f.tenant_id = value;
    else if (key == "code") f.code_prefix = value;
  }
  EventPage page = store_.List(f);
  json events = json::array();
  for (const auto& e : page.events) events.push_back(ToJson(e));
  return {200, PublicDump(json{{"events", std::move(events)},
                               {"next", page.next ? json(std::to_string(*page.next)) : json(nullptr)}})};
}

HttpServer::Reply HttpServer::RetryEvent(Request& req) {
  RetryFrom from = RetryFrom::kFailedStep;
  if (!req.body.empty()) {
    json body = ParseJsonBody(req.body);
    if (!body.is_object()) throw UsageError("the retry body must be a JSON object {\"from\": ...}");
    for (const auto& [key, value] : body.items()) {
      if (key != "from") throw UsageError("unknown field (expected from)");
      if (value == "start") from = RetryFrom::kStart;
      else if (value == "failed_step") from = RetryFrom::kFailedStep;
      else throw UsageError("from must be \"start\" or \"failed_step\"");
    }
  }
  return {200, PublicDump(ToJson(store_.Retry(req.code, from)))};
}

HttpServer::Reply HttpServer::CancelEvent(Request& req) {
  json body = req.body.empty() ? json::object() : ParseJsonBody(req.body);
  return {200, PublicDump(ToJson(store_.Cancel(req.code, ParseCancelReason(body))))};
}

// --- issue 37: pauses and schedules ---

HttpServer::Reply HttpServer::Topics(Request&) {
  json topics = json::array();
  for (const TopicRow& t : control_.Topics()) topics.push_back(ToJson(t));
  return {200, PublicDump(json{{"topics", std::move(topics)}})};
}

// GET /v1/captures (issue 36): each capture's state, position, lags, rates, backlog,
// paused tables and last error, as `dsync captures --json` prints them.
HttpServer::Reply HttpServer::Captures(Request&) {
  capture::CaptureStore captures(store_.pool(), store_.options().service);
  return {200, PublicDump(json{{"captures", captures.ListJson()}})};
}

HttpServer::Reply HttpServer::PauseTopic(Request& req) {
  const auto [by, reason] = ParsePauseBody(req.body.empty() ? json::object() : ParseJsonBody(req.body));
  return {200, PublicDump(ToJson(control_.Pause(req.code, by, reason)))};
}

HttpServer::Reply HttpServer::ResumeTopic(Request& req) {
  if (!req.body.empty()) throw UsageError("a resume takes no body");
  return {200, PublicDump(ToJson(control_.Resume(req.code)))};
}

HttpServer::Reply HttpServer::Schedules(Request&) {
  json schedules = json::array();
  for (const ScheduleRow& s : control_.Schedules()) schedules.push_back(ToJson(s));
  return {200, PublicDump(json{{"schedules", std::move(schedules)}})};
}

HttpServer::Reply HttpServer::Nodes(Request& req) {
  bool all = false;
  for (const auto& [key, value] : req.query) {
    if (key != "all") continue;
    if (value == "true" || value == "1") all = true;
    else if (value == "false" || value == "0") all = false;
    else throw UsageError("all must be true or false");
  }
  json nodes = json::array();
  for (const auto& n : store_.Nodes(all)) nodes.push_back(ToJson(n));
  return {200, PublicDump(json{{"nodes", std::move(nodes)}})};
}

HttpServer::Reply HttpServer::ConsoleAsset(Request& req) {
  const console::Asset& asset = *console::FindAsset(req.path);
  const std::string etag = console::ETag(asset);
  const std::string* if_none_match = req.head->Find("If-None-Match");
  const bool fresh = if_none_match != nullptr && *if_none_match == etag;
  Reply reply{fresh ? 304 : 200, fresh ? "" : std::string(asset.text), asset.content_type};
  reply.headers = {{"Cache-Control", "no-cache"},  // revalidate: a new binary may bring new files
                   {"ETag", etag},
                   {"Content-Security-Policy", console::kContentSecurityPolicy},
                   {"X-Frame-Options", "DENY"},
                   {"Referrer-Policy", "no-referrer"},
                   {"Cross-Origin-Resource-Policy", "same-origin"}};
  return reply;
}

HttpServer::Reply HttpServer::Health(Request&) {
  api::Health h = store_.CheckHealth();
  json body = ToJson(h);
  if (!h.database_ok) {
    spdlog::warn("HTTP_HEALTH_DB_DOWN err={}", h.database_error);
    body["database"]["error"] = "the database is unavailable (details in the server log)";
  }
  return {h.database_ok ? 200 : 503, Dump(body)};
}

HttpServer::Reply HttpServer::StreamEvent(Request& req) {
  const std::string& code = req.code;
  EventDetail d = store_.Get(code);  // 404 before anything is sent
  const int max_streams = options_.max_streams > 0 ? options_.max_streams : std::max(1, options_.connection.threads / 2);
  if (stats_.open_streams.fetch_add(1) >= max_streams) {
    stats_.open_streams.fetch_sub(1);
    stats_.rejected_streams++;
    throw HttpError(503, "too many open streams (at most " + std::to_string(max_streams) + ")");
  }
  struct Slot {
    std::atomic<int>& n;
    ~Slot() { n.fetch_sub(1); }
  } slot{stats_.open_streams};

  // From here on the answer is written as it goes; no read deadline applies to it.
  req.streamed = true;
  HttpResponder& out = *req.out;
  struct End {
    HttpResponder& out;
    ~End() { out.End(); }
  };
  if (!out.Begin(200, "text/event-stream",
                 {{"Cache-Control", "no-store"}, {"X-Accel-Buffering", "no"}, {"X-Content-Type-Options", "nosniff"}})) {
    return {};
  }
  End end{out};
  auto write = [&out](const std::string& text) { return out.Write(text); };

  std::string last;
  auto last_write = clock_.Now();
  bool db_down = false;
  for (;;) {
    const std::string data = PublicDump(Progress(d));
    if (data != last) {
      if (!write("event: progress\ndata: " + data + "\n\n")) return {};  // the client left
      last = data;
      last_write = clock_.Now();
    }
    if (IsTerminal(d.event.status)) {
      write("event: end\ndata: " + data + "\n\n");
      return {};
    }
    if (!WaitFor(options_.stream_poll_interval)) {
      write("event: error\ndata: " + Dump(json{{"error", "the server is shutting down"}}) + "\n\n");
      return {};
    }
    if (clock_.Now() - last_write >= options_.stream_ping_interval) {
      if (!write(": ping\n\n")) return {};
      last_write = clock_.Now();
    }
    try {
      d = store_.Get(code);
      db_down = false;
    } catch (const NotFoundError&) {
      write("event: error\ndata: " + Dump(json{{"error", "the event no longer exists"}}) + "\n\n");
      return {};
    } catch (const DbError& e) {
      // Keep the stream: the database may come back (the pool reconnects).
      if (!db_down) spdlog::warn("HTTP_STREAM_DB_ERROR err={}", e.what());
      db_down = true;
      if (!write(": the database is unavailable; retrying\n\n")) return {};
      last_write = clock_.Now();
    }
  }
}

std::string HttpServer::RenderMetrics() {
  metrics::TextWriter w;
  WriteDatabaseMetrics(store_, w);
  components_.WriteTo(w);
  WriteMetrics(stats_, w);
  return w.str();
}

}  // namespace dsync::api
