#include "api/http_server.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <utility>
#include <vector>

#include <Poco/Exception.h>
#include <Poco/Net/HTTPRequestHandler.h>
#include <Poco/Net/HTTPRequestHandlerFactory.h>
#include <Poco/Net/HTTPServer.h>
#include <Poco/Net/HTTPServerParams.h>
#include <Poco/Net/HTTPServerRequest.h>
#include <Poco/Net/HTTPServerRequestImpl.h>
#include <Poco/Net/HTTPServerResponse.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/ServerSocket.h>
#include <Poco/Net/SocketAddress.h>
#include <Poco/ThreadPool.h>
#include <Poco/Timespan.h>
#include <spdlog/spdlog.h>

#include "api/http_text.h"
#include "core/error.h"

namespace dsync::api {

struct HttpServer::Reply {
  Reply() = default;
  Reply(int status, std::string body, std::string content_type = "application/json")
      : status(status), body(std::move(body)), content_type(std::move(content_type)) {}
  int status = 200;
  std::string body;                     // JSON text, or the metrics text
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

struct HttpServer::Request {
  std::string method;
  Route route = Route::kUnknown;
  std::string code;  // the {code} path segment, percent-decoded
  std::vector<std::pair<std::string, std::string>> query;
  std::string body;
  bool body_consumed = true;  // false: a body may still be in the socket (close after replying)
};

namespace {

using nlohmann::json;

constexpr int64_t kLingerMaxBytes = 64LL << 20;

// The progress document a stream sends.
json Progress(const EventDetail& d) {
  int done = 0, compensated = 0;
  for (const auto& s : d.steps) {
    if (s.status == "SUCCESS") ++done;
    if (s.status == "COMPENSATED") ++compensated;
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

// After a reply that left (part of) a request body unread: stop sending, then read and
// drop what the client still sends for a moment, so that closing the socket does not
// reset the connection before the client has read the reply.
void LingeringClose(Poco::Net::HTTPServerRequest& raw) {
  auto* impl = dynamic_cast<Poco::Net::HTTPServerRequestImpl*>(&raw);
  if (impl == nullptr) return;
  try {
    Poco::Net::StreamSocket& socket = impl->socket();
    socket.shutdownSend();
    socket.setReceiveTimeout(Poco::Timespan(0, 500 * 1000));
    char buf[16384];
    for (int64_t total = 0; total < kLingerMaxBytes;) {
      const int n = socket.receiveBytes(buf, sizeof buf);
      if (n <= 0) break;
      total += n;
    }
  } catch (const std::exception&) {
    // Timed out or reset: the socket closes either way.
  }
}

class Handler final : public Poco::Net::HTTPRequestHandler {
 public:
  explicit Handler(HttpServer& server) : server_(server) {}
  void handleRequest(Poco::Net::HTTPServerRequest& request, Poco::Net::HTTPServerResponse& response) override {
    server_.Handle(request, response);
  }

 private:
  HttpServer& server_;
};

class HandlerFactory final : public Poco::Net::HTTPRequestHandlerFactory {
 public:
  explicit HandlerFactory(HttpServer& server) : server_(server) {}
  Poco::Net::HTTPRequestHandler* createRequestHandler(const Poco::Net::HTTPServerRequest&) override {
    return new Handler(server_);
  }

 private:
  HttpServer& server_;
};

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
    case Route::kUnknown: return "other";
  }
  return "other";
}

HttpOptions HttpOptionsFromSettings(const ApiSettings& api) {
  HttpOptions o;
  o.listen = api.listen;
  o.token = api.token;
  o.max_body_bytes = api.max_body_bytes;
  return o;
}

HttpServer::HttpServer(EventStore& store, HttpOptions options, metrics::Registry components)
    : store_(store), options_(std::move(options)), components_(std::move(components)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Start() {
  std::lock_guard lock(mu_);
  if (started_) throw std::logic_error("HttpServer::Start called twice");
  if (options_.threads < 1) throw UsageError("api: threads must be at least 1");
  if (options_.max_body_bytes < 1) throw UsageError("api.max_body_bytes must be at least 1");
  Poco::Net::SocketAddress address;
  try {
    address = Poco::Net::SocketAddress(options_.listen);
  } catch (const Poco::Exception& e) {
    throw UsageError("api.listen: '" + options_.listen + "' is not HOST:PORT (" + e.displayText() + ")");
  }
  Poco::Net::ServerSocket socket;
  try {
    // SO_REUSEADDR (restart while old connections linger) but not SO_REUSEPORT, which
    // would let a second server share the port silently.
    socket.bind(address, /*reuseAddress=*/true, /*reusePort=*/false);
    socket.listen(128);
  } catch (const Poco::Exception& e) {
    throw Error("api.listen: cannot listen on " + options_.listen + ": " + e.displayText());
  }
  port_ = socket.address().port();

  auto* params = new Poco::Net::HTTPServerParams;
  params->setMaxThreads(options_.threads);
  params->setMaxQueued(256);
  params->setKeepAlive(true);
  params->setMaxKeepAliveRequests(1000);
  params->setKeepAliveTimeout(Poco::Timespan(10, 0));
  params->setTimeout(Poco::Timespan(options_.socket_timeout.count() * 1000));
  params->setServerName("dsync");
  params->setSoftwareVersion("");
  threads_ = std::make_unique<Poco::ThreadPool>("dsync-http", 1, options_.threads + 1);
  server_ = std::make_unique<Poco::Net::HTTPServer>(new HandlerFactory(*this), *threads_, socket, params);
  server_->start();
  started_ = true;
  spdlog::info("HTTP_LISTENING listen={} port={} auth={} max_body_bytes={} threads={}", options_.listen, port_,
               options_.token.empty() ? "none" : "bearer", options_.max_body_bytes, options_.threads);
}

void HttpServer::Stop() {
  std::unique_ptr<Poco::Net::HTTPServer> server;
  std::unique_ptr<Poco::ThreadPool> threads;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    server = std::move(server_);
    threads = std::move(threads_);
  }
  stop_cv_.notify_all();
  if (!server) return;
  server->stopAll(/*abortCurrent=*/true);  // shuts the sockets of open connections down
  threads->joinAll();                      // running handlers have returned
  server.reset();
  threads.reset();
  spdlog::info("HTTP_STOPPED port={}", port_);
}

bool HttpServer::WaitFor(Millis d) {
  std::unique_lock lock(mu_);
  return !stop_cv_.wait_for(lock, d, [this] { return stopping_.load(); });
}

void HttpServer::Handle(Poco::Net::HTTPServerRequest& raw, Poco::Net::HTTPServerResponse& response) {
  const auto started = std::chrono::steady_clock::now();
  Request req;
  req.method = raw.getMethod();
  Reply reply;
  bool streamed = false;
  try {
    reply = Dispatch(req, raw, response, streamed);
  } catch (const HttpError& e) {
    reply = {e.status, ErrorBody(e.what())};
    if (e.status == 401) reply.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"dsync\"");
    if (e.status == 405) reply.headers.emplace_back("Allow", e.allow);
  } catch (const UsageError& e) {
    reply = {400, ErrorBody(e.what())};
  } catch (const NotFoundError& e) {
    reply = {404, ErrorBody(e.what())};
  } catch (const ConflictError& e) {
    reply = {409, ErrorBody(e.what())};
  } catch (const SchemaError& e) {
    spdlog::warn("HTTP_SCHEMA_ERROR route={} err={}", RouteName(req.route), e.what());
    reply = {503, ErrorBody(e.what())};
  } catch (const DbError& e) {
    // The detail may name the database host and user: the log gets it, the client not.
    spdlog::warn("HTTP_DB_ERROR route={} err={}", RouteName(req.route), e.what());
    reply = {503, ErrorBody(e.kind() == DbError::Kind::kPoolExhausted
                                ? "the database is busy; try again later"
                                : "the database is unavailable; try again later")};
  } catch (const std::exception& e) {
    spdlog::error("HTTP_INTERNAL_ERROR route={} err={}", RouteName(req.route), e.what());
    reply = {500, ErrorBody("internal error")};
  }
  int status = reply.status;
  if (streamed || response.sent()) {
    status = 200;  // a stream: its headers went out; an error after that ends it early
  } else {
    try {
      response.setStatusAndReason(static_cast<Poco::Net::HTTPResponse::HTTPStatus>(reply.status));
      response.setContentType(reply.content_type);
      response.set("Cache-Control", "no-store");
      response.set("X-Content-Type-Options", "nosniff");
      for (const auto& [name, value] : reply.headers) response.set(name, value);
      if (!req.body_consumed) response.setKeepAlive(false);
      response.setContentLength64(static_cast<Poco::Int64>(reply.body.size()));
      std::ostream& out = response.send();
      out.write(reply.body.data(), static_cast<std::streamsize>(reply.body.size()));
      out.flush();
    } catch (const std::exception& e) {
      spdlog::debug("HTTP_SEND_FAILED route={} err={}", RouteName(req.route), e.what());
    }
    if (!req.body_consumed) LingeringClose(raw);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  stats_.requests.Increment({RouteName(req.route), MethodLabel(req.method), std::to_string(status)});
  stats_.duration[static_cast<size_t>(req.route)].Observe(seconds);
  spdlog::debug("HTTP_REQUEST method={} route={} status={} ms={:.1f}", MethodLabel(req.method), RouteName(req.route),
                status, seconds * 1000);
}

HttpServer::Reply HttpServer::Dispatch(Request& req, Poco::Net::HTTPServerRequest& raw,
                                       Poco::Net::HTTPServerResponse& response, bool& streamed) {
  // Does the request carry a body we have not read? (Until read, the answer decides
  // whether the connection can be kept.)
  bool chunked = raw.getChunkedTransferEncoding();
  int64_t declared = 0;
  try {
    declared = raw.hasContentLength() ? raw.getContentLength64() : 0;
  } catch (const Poco::Exception&) {
    req.body_consumed = false;
    throw HttpError(400, "malformed Content-Length");
  }
  if (declared < 0) {
    req.body_consumed = false;
    throw HttpError(400, "malformed Content-Length");
  }
  req.body_consumed = !chunked && declared == 0;

  // Route (no side effects yet).
  const std::string& uri = raw.getURI();
  const size_t qpos = uri.find('?');
  const std::string_view raw_path = std::string_view(uri).substr(0, qpos);
  const std::string_view raw_query =
      qpos == std::string::npos ? std::string_view() : std::string_view(uri).substr(qpos + 1);
  std::vector<std::string_view> segments = Split(raw_path, '/');
  // "/a/b" splits into "", "a", "b".
  const bool rooted = segments.size() >= 2 && segments[0].empty();
  std::vector<std::string_view> s(rooted ? segments.begin() + 1 : segments.end(), segments.end());
  const std::string method = req.method;
  std::string allow;
  auto at = [&](size_t i, std::string_view v) { return s.size() > i && s[i] == v; };
  if (s.size() == 1 && at(0, "healthz")) {
    req.route = Route::kHealth, allow = "GET";
  } else if (s.size() == 1 && at(0, "metrics")) {
    req.route = Route::kMetrics, allow = "GET";
  } else if (s.size() == 2 && at(0, "v1") && at(1, "nodes")) {
    req.route = Route::kNodes, allow = "GET";
  } else if (s.size() == 4 && at(0, "v1") && at(1, "nodes") && !s[2].empty() && at(3, "drain")) {
    req.route = Route::kDrainNode, allow = "POST";
  } else if (s.size() == 2 && at(0, "v1") && at(1, "overview")) {
    req.route = Route::kOverview, allow = "GET";
  } else if (s.size() == 2 && at(0, "v1") && at(1, "verify")) {
    req.route = Route::kVerify, allow = "GET, POST";
  } else if (console::FindAsset(raw_path) != nullptr) {
    req.route = Route::kConsole, allow = "GET";
  } else if (s.size() == 2 && at(0, "v1") && at(1, "events")) {
    req.route = method == "POST" ? Route::kCreateEvent : Route::kListEvents, allow = "GET, POST";
  } else if (s.size() == 2 && at(0, "v1") && at(1, "batches")) {
    req.route = Route::kCreateBatch, allow = "POST";
  } else if (s.size() == 3 && at(0, "v1") && at(1, "batches") && !s[2].empty()) {
    req.route = Route::kGetBatch, allow = "GET";
  } else if (s.size() == 3 && at(0, "v1") && at(1, "events") && !s[2].empty()) {
    req.route = Route::kGetEvent, allow = "GET";
  } else if (s.size() == 4 && at(0, "v1") && at(1, "events") && !s[2].empty() && at(3, "stream")) {
    req.route = Route::kStreamEvent, allow = "GET";
  } else if (s.size() == 4 && at(0, "v1") && at(1, "events") && !s[2].empty() && at(3, "retry")) {
    req.route = Route::kRetryEvent, allow = "POST";
  } else if (s.size() == 4 && at(0, "v1") && at(1, "events") && !s[2].empty() && at(3, "cancel")) {
    req.route = Route::kCancelEvent, allow = "POST";
  }

  // Authentication comes before anything that tells the client about the server (the
  // console's files tell nothing: they hold no data).
  if (!options_.token.empty() && req.route != Route::kConsole) {
    std::string scheme, credentials;
    bool ok = false;
    if (raw.has("Authorization")) {
      const std::string& header = raw.get("Authorization");
      const size_t space = header.find(' ');
      if (space != std::string::npos && IEquals(std::string_view(header).substr(0, space), "Bearer")) {
        ok = ConstantTimeEquals(options_.token, std::string(Trim(std::string_view(header).substr(space + 1))));
      }
    }
    if (!ok) throw HttpError(401, "missing or wrong bearer token (Authorization: Bearer <api.token>)");
  }
  if (req.route == Route::kUnknown) throw HttpError(404, "no such route");
  bool method_allowed = false;
  for (std::string_view m : Split(allow, ',')) method_allowed |= Trim(m) == method;
  if (!method_allowed) {
    throw HttpError(405, "method " + std::string(MethodLabel(method)) + " is not allowed here (allowed: " + allow + ")",
                    allow);
  }
  if (req.route == Route::kGetBatch || req.route == Route::kGetEvent || req.route == Route::kStreamEvent ||
      req.route == Route::kRetryEvent || req.route == Route::kDrainNode || req.route == Route::kCancelEvent) {
    req.code = PercentDecode(s[2], /*plus_as_space=*/false);
    // No stored code can hold these; the database is not asked about them.
    if (!IsCleanText(req.code)) throw UsageError("the code in the path is not valid UTF-8 text without control characters");
  }

  // Query parameters: each route takes a fixed set, each at most once.
  static const std::map<Route, std::set<std::string>> kQueryKeys = {
      {Route::kListEvents, {"topic", "status", "limit", "after", "batch", "tenant", "code"}},
      {Route::kNodes, {"all"}}, {Route::kOverview, {"topics"}}};
  if (!raw_query.empty()) {
    auto allowed = kQueryKeys.find(req.route);
    for (std::string_view pair : Split(raw_query, '&')) {
      if (pair.empty()) continue;
      const size_t eq = pair.find('=');
      std::string key = PercentDecode(pair.substr(0, eq), true);
      std::string value = eq == std::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1), true);
      if (allowed == kQueryKeys.end() || !allowed->second.count(key)) {
        std::string known;
        if (allowed != kQueryKeys.end()) {
          for (const auto& k : allowed->second) known += (known.empty() ? "" : ", ") + k;
        }
        throw UsageError("unknown query parameter (" + (known.empty() ? "this route takes none" : "known: " + known) +
                         ")");
      }
      for (const auto& [k, _] : req.query) {
        if (k == key) throw UsageError("query parameter '" + key + "' is given twice");
      }
      req.query.emplace_back(std::move(key), std::move(value));
    }
  }

  // The body: POST routes read it (bounded); other methods must not send one.
  if (method == "POST") {
    const std::string type = raw.getContentType();
    const std::string_view media = Trim(std::string_view(type).substr(0, type.find(';')));
    if (!IEquals(media, "application/json")) {
      throw HttpError(415, "Content-Type must be application/json");
    }
    if (declared > options_.max_body_bytes) {
      throw HttpError(413, "the request body is " + std::to_string(declared) + " bytes; the limit is " +
                               std::to_string(options_.max_body_bytes) + " (api.max_body_bytes)");
    }
    std::istream& in = raw.stream();
    char buf[16384];
    for (;;) {
      in.read(buf, sizeof buf);
      const std::streamsize n = in.gcount();
      if (n <= 0) break;
      if (static_cast<int64_t>(req.body.size()) + n > options_.max_body_bytes) {
        throw HttpError(413, "the request body exceeds " + std::to_string(options_.max_body_bytes) +
                                 " bytes (api.max_body_bytes)");
      }
      req.body.append(buf, static_cast<size_t>(n));
    }
    if (in.bad() || (!chunked && static_cast<int64_t>(req.body.size()) != declared)) {
      throw HttpError(400, "the request body ended early or could not be read");
    }
    req.body_consumed = true;
  } else if (!req.body_consumed) {
    throw HttpError(400, "a " + std::string(MethodLabel(method)) + " request takes no body");
  }

  switch (req.route) {
    case Route::kCreateEvent: return CreateEvent(req);
    case Route::kCreateBatch: return CreateBatch(req);
    case Route::kListEvents: return ListEvents(req);
    case Route::kGetEvent: return {200, Dump(ToJson(store_.Get(req.code)))};
    case Route::kGetBatch: return {200, Dump(ToJson(store_.GetBatch(req.code)))};
    case Route::kRetryEvent: return RetryEvent(req, req.code);
    case Route::kCancelEvent:
      return {200, Dump(ToJson(store_.Cancel(req.code, ParseCancelReason(req.body.empty() ? json::object()
                                                                                         : ParseJsonBody(req.body)))))};
    case Route::kNodes: return Nodes(req);
    case Route::kHealth: return Health();
    case Route::kMetrics: return {200, RenderMetrics(), "text/plain; version=0.0.4; charset=utf-8"};
    case Route::kDrainNode:
      if (!req.body.empty()) throw UsageError("a drain takes no body");
      return {200, Dump(ToJson(store_.Drain(req.code)))};
    case Route::kOverview: {
      bool by_topic = false;
      for (const auto& [key, value] : req.query) {
        if (value == "true" || value == "1") by_topic = true;
        else if (value != "false" && value != "0") throw UsageError(key + " must be true or false");
      }
      return {200, Dump(console::Overview(store_, throughput_, by_topic))};
    }
    case Route::kConsole: return ConsoleAsset(raw, raw_path);
    case Route::kVerify: return Verify(req);
    case Route::kStreamEvent:
      StreamEvent(req.code, response);
      streamed = true;
      return {};
    case Route::kUnknown: break;
  }
  throw HttpError(404, "no such route");
}

HttpServer::Reply HttpServer::Verify(const Request& req) {
  if (req.method == "GET") {  // the latest result per (topic or table, filter, table, target)
    json results = json::array();
    for (const auto& v : ReadLatestVerify(store_.pool())) results.push_back(v.ToJson());
    return {200, Dump(json{{"results", results}})};
  }
  VerifyRequest r = ParseVerifyRequest(ParseJsonBody(req.body));
  VerifyService* service;
  {
    std::lock_guard lock(verify_mu_);
    if (!verify_) verify_ = std::make_unique<VerifyService>(store_.settings(), &store_.pool());
    service = verify_.get();
  }
  VerifyReport report = service->Run(r);
  service->Record(r, report);
  return {200, Dump(report.ToJson(r.max_keys))};
}

HttpServer::Reply HttpServer::CreateEvent(const Request& req) {
  NewEvent e = ParseNewEvent(ParseJsonBody(req.body));
  ProduceResult r = store_.Produce(e);
  Reply reply{r.created ? 201 : 200, Dump(ToJson(r.event))};
  reply.headers.emplace_back("Location", "/v1/events/" + PercentEncode(r.event.code));
  return reply;
}

HttpServer::Reply HttpServer::CreateBatch(const Request& req) {
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

HttpServer::Reply HttpServer::ListEvents(const Request& req) {
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
  return {200, Dump(json{{"events", std::move(events)},
                         {"next", page.next ? json(std::to_string(*page.next)) : json(nullptr)}})};
}

HttpServer::Reply HttpServer::RetryEvent(const Request& req, const std::string& code) {
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
  return {200, Dump(ToJson(store_.Retry(code, from)))};
}

HttpServer::Reply HttpServer::Nodes(const Request& req) {
  bool all = false;
  for (const auto& [key, value] : req.query) {
    if (key != "all") continue;
    if (value == "true" || value == "1") all = true;
    else if (value == "false" || value == "0") all = false;
    else throw UsageError("all must be true or false");
  }
  json nodes = json::array();
  for (const auto& n : store_.Nodes(all)) nodes.push_back(ToJson(n));
  return {200, Dump(json{{"nodes", std::move(nodes)}})};
}

HttpServer::Reply HttpServer::ConsoleAsset(const Poco::Net::HTTPServerRequest& raw, std::string_view path) {
  const console::Asset& asset = *console::FindAsset(path);
  const std::string etag = console::ETag(asset);
  const bool fresh = raw.has("If-None-Match") && raw.get("If-None-Match") == etag;
  Reply reply{fresh ? 304 : 200, fresh ? "" : std::string(asset.text), asset.content_type};
  reply.headers = {{"Cache-Control", "no-cache"},  // revalidate: a new binary may bring new files
                   {"ETag", etag},
                   {"Content-Security-Policy", console::kContentSecurityPolicy},
                   {"X-Frame-Options", "DENY"},
                   {"Referrer-Policy", "no-referrer"},
                   {"Cross-Origin-Resource-Policy", "same-origin"}};
  return reply;
}

HttpServer::Reply HttpServer::Health() {
  api::Health h = store_.CheckHealth();
  json body = ToJson(h);
  if (!h.database_ok) {
    spdlog::warn("HTTP_HEALTH_DB_DOWN err={}", h.database_error);
    body["database"]["error"] = "the database is unavailable (details in the server log)";
  }
  return {h.database_ok ? 200 : 503, Dump(body)};
}

void HttpServer::StreamEvent(const std::string& code, Poco::Net::HTTPServerResponse& response) {
  EventDetail d = store_.Get(code);  // 404 before anything is sent
  const int max_streams = options_.max_streams > 0 ? options_.max_streams : std::max(1, options_.threads / 2);
  if (stats_.open_streams.fetch_add(1) >= max_streams) {
    stats_.open_streams.fetch_sub(1);
    stats_.rejected_streams++;
    throw HttpError(503, "too many open streams (at most " + std::to_string(max_streams) + ")");
  }
  struct Slot {
    std::atomic<int>& n;
    ~Slot() { n.fetch_sub(1); }
  } slot{stats_.open_streams};

  response.setStatusAndReason(Poco::Net::HTTPResponse::HTTP_OK);
  response.setContentType("text/event-stream");
  response.set("Cache-Control", "no-store");
  response.set("X-Accel-Buffering", "no");
  response.setChunkedTransferEncoding(true);
  response.setKeepAlive(false);
  std::ostream& out = response.send();
  auto write = [&out](const std::string& text) {
    out << text;
    out.flush();
    return out.good();
  };

  std::string last;
  auto last_write = std::chrono::steady_clock::now();
  bool db_down = false;
  for (;;) {
    const std::string data = Dump(Progress(d));
    if (data != last) {
      if (!write("event: progress\ndata: " + data + "\n\n")) return;  // the client left
      last = data;
      last_write = std::chrono::steady_clock::now();
    }
    if (IsTerminal(d.event.status)) {
      write("event: end\ndata: " + data + "\n\n");
      return;
    }
    if (!WaitFor(options_.stream_poll_interval)) {
      write("event: error\ndata: " + Dump(json{{"error", "the server is shutting down"}}) + "\n\n");
      return;
    }
    if (std::chrono::steady_clock::now() - last_write >= options_.stream_ping_interval) {
      if (!write(": ping\n\n")) return;
      last_write = std::chrono::steady_clock::now();
    }
    try {
      d = store_.Get(code);
      db_down = false;
    } catch (const NotFoundError&) {
      write("event: error\ndata: " + Dump(json{{"error", "the event no longer exists"}}) + "\n\n");
      return;
    } catch (const DbError& e) {
      // Keep the stream: the database may come back (the pool reconnects).
      if (!db_down) spdlog::warn("HTTP_STREAM_DB_ERROR err={}", e.what());
      db_down = true;
      if (!write(": the database is unavailable; retrying\n\n")) return;
      last_write = std::chrono::steady_clock::now();
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
