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

#include "consumer/consumer_node.h"
#include "core/error.h"
#include "dispatcher/dispatcher_service.h"
#include "saga/saga_engine.h"

namespace dsync::api {

// A rejection decided by the HTTP layer itself (auth, routing, size, media type).
struct HttpError : Error {
  HttpError(int status, const std::string& message, std::string allow = {})
      : Error(message), status(status), allow(std::move(allow)) {}
  int status;
  std::string allow;  // for 405
};

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

constexpr int kMaxJsonDepth = 64;
constexpr int64_t kLingerMaxBytes = 64LL << 20;

// JSON text of anything we answer: invalid UTF-8 (a row written by plain SQL may hold
// any bytes) becomes U+FFFD instead of an exception.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string ErrorBody(const std::string& message) {
  std::string line = message.substr(0, 1000);
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return Dump(json{{"error", line}});
}

// Decodes %XX (and '+' as a space in query strings). Throws HttpError 400.
std::string PercentDecode(std::string_view s, bool plus_as_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) throw HttpError(400, "malformed percent-encoding in the URL");
      const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0) throw HttpError(400, "malformed percent-encoding in the URL");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (s[i] == '+' && plus_as_space) {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string PercentEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

// Valid UTF-8 without control characters (what EventStore accepts in any text field).
bool IsCleanText(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) return false;
    i += len;
  }
  return true;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

// Equal iff `given` equals `secret`; the time taken depends on the secret's length
// only, never on where the first difference is.
bool ConstantTimeEquals(const std::string& secret, const std::string& given) {
  unsigned char diff = secret.size() == given.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(static_cast<unsigned char>(secret[i]) ^ g);
  }
  return diff == 0;
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

const char* MethodLabel(const std::string& m) {
  static const char* kKnown[] = {"GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"};
  for (const char* k : kKnown) {
    if (m == k) return k;
  }
  return "other";
}

// Parses JSON with a nesting limit (a deep body would otherwise recurse through the
// stack when serialised). Throws UsageError.
json ParseJsonBody(const std::string& body) {
  if (body.empty()) throw UsageError("the request body is empty; expected a JSON object");
  try {
    return json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) {
        throw UsageError("the body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
      return true;
    });
  } catch (const json::parse_error& e) {
    throw UsageError("the body is not valid JSON (at byte " + std::to_string(e.byte) + ")");
  }
}

// Strict non-negative integer of at most `max_digits` digits. Throws UsageError.
int64_t ParseCount(const std::string& name, const std::string& text, size_t max_digits) {
  if (text.empty() || text.size() > max_digits ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    throw UsageError(name + " must be a positive integer");
  }
  return std::stoll(text);
}

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

HttpServer::HttpServer(EventStore& store, HttpOptions options, MetricsSources sources)
    : store_(store), options_(std::move(options)), sources_(sources) {}

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
      req.route == Route::kRetryEvent || req.route == Route::kDrainNode) {
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
    case Route::kStreamEvent:
      StreamEvent(req.code, response);
      streamed = true;
      return {};
    case Route::kUnknown: break;
  }
  throw HttpError(404, "no such route");
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
    if (key != "batch_code" && key != "events") throw UsageError("unknown field (expected batch_code, events)");
  }
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
  BatchResult r = store_.ProduceBatch(code->get<std::string>(), std::move(events));
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
  using metrics::Type;
  metrics::TextWriter w;

  // From the database, on each scrape.
  api::Health h = store_.CheckHealth();
  w.Family("dsync_database_up", "1 when the framework database answered this scrape.", Type::kGauge);
  w.Sample("dsync_database_up", {}, h.database_ok ? 1 : 0);
  if (h.database_ok) {
    w.Family("dsync_schema_version", "Applied schema migration version.", Type::kGauge);
    w.Sample("dsync_schema_version", {}, h.schema_version);
    w.Family("dsync_lease_held", "1 when some dispatcher holds an unexpired lease (database view).", Type::kGauge);
    w.Sample("dsync_lease_held", {}, h.lease.held ? 1 : 0);
    w.Family("dsync_lease_token", "Fencing token of the current or last lease tenure.", Type::kGauge);
    w.Sample("dsync_lease_token", {}, static_cast<double>(h.lease.token));
    w.Family("dsync_lease_expires_in_seconds", "Time left on the held lease; 0 when free.", Type::kGauge);
    w.Sample("dsync_lease_expires_in_seconds", {}, static_cast<double>(h.lease.expires_in_ms) / 1000.0);
    try {
      auto counts = store_.CountByTopicStatus();
      std::map<std::string, std::map<std::string, int64_t>> by_topic;
      for (const auto& [topic, status, n] : counts) by_topic[topic][status] = n;
      w.Family("dsync_events", "Events by topic and status.", Type::kGauge);
      static const char* kStatuses[] = {"PENDING", "ASSIGNED", "RUNNING", "SUCCESS",
                                        "FAILED", "COMPENSATING", "COMPENSATED"};
      for (const auto& [topic, statuses] : by_topic) {
        for (const char* status : kStatuses) {
          auto it = statuses.find(status);
          w.Sample("dsync_events", {{"topic", topic}, {"status", status}},
                   static_cast<double>(it == statuses.end() ? 0 : it->second));
        }
      }
      std::map<std::string, int64_t> nodes{{"online", 0}, {"draining", 0}, {"offline", 0}};
      int64_t in_flight = 0;
      for (const auto& n : store_.Nodes(true)) {
        nodes[n.status]++;
        in_flight += n.in_flight;
      }
      w.Family("dsync_nodes", "Registered consumer nodes of the service by status.", Type::kGauge);
      for (const auto& [status, n] : nodes) w.Sample("dsync_nodes", {{"status", status}}, static_cast<double>(n));
      w.Family("dsync_nodes_in_flight_events", "Events ASSIGNED, RUNNING or COMPENSATING on the service's nodes.",
               Type::kGauge);
      w.Sample("dsync_nodes_in_flight_events", {}, static_cast<double>(in_flight));
    } catch (const Error& e) {
      spdlog::warn("METRICS_DB_ERROR err={}", e.what());
    }
  }

  if (sources_.pool != nullptr) {
    storage::PoolStats p = sources_.pool->stats();
    w.Family("dsync_db_pool_connections", "Framework database connections by state.", Type::kGauge);
    w.Sample("dsync_db_pool_connections", {{"state", "in_use"}}, p.in_use);
    w.Sample("dsync_db_pool_connections", {{"state", "idle"}}, std::max(0, p.open - p.in_use));
    w.Family("dsync_db_pool_max_connections", "Size limit of the connection pool.", Type::kGauge);
    w.Sample("dsync_db_pool_max_connections", {}, p.max_size);
    w.Family("dsync_db_pool_connects_total", "Connections opened.", Type::kCounter);
    w.Sample("dsync_db_pool_connects_total", {}, static_cast<double>(p.connects));
    w.Family("dsync_db_pool_discarded_total", "Connections dropped as broken.", Type::kCounter);
    w.Sample("dsync_db_pool_discarded_total", {}, static_cast<double>(p.discarded));
    w.Family("dsync_db_pool_borrow_waits_total", "Borrows that waited for a free connection.", Type::kCounter);
    w.Sample("dsync_db_pool_borrow_waits_total", {}, static_cast<double>(p.borrow_waits));
    w.Family("dsync_db_retries_total", "Units of work re-run after a deadlock, lock timeout or lost connection.",
             Type::kCounter);
    w.Sample("dsync_db_retries_total", {}, static_cast<double>(p.retries));
  }

  // Resets by reason, from whichever components run here.
  metrics::Labels none;
  std::vector<std::pair<std::string, uint64_t>> resets;
  if (sources_.dispatcher != nullptr) {
    dispatcher::DispatcherStats s = sources_.dispatcher->stats();
    w.Family("dsync_dispatcher_leader", "1 while this process holds the dispatcher lease.", Type::kGauge);
    w.Sample("dsync_dispatcher_leader", none, s.leader ? 1 : 0);
    w.Family("dsync_lease_acquired_total", "Lease tenures started by this process.", Type::kCounter);
    w.Sample("dsync_lease_acquired_total", none, static_cast<double>(s.lease_acquired));
    w.Family("dsync_lease_lost_total", "Lease tenures lost by this process, by cause.", Type::kCounter);
    w.Sample("dsync_lease_lost_total", {{"cause", "watchdog"}}, static_cast<double>(s.lease_lost_by_watchdog));
    w.Sample("dsync_lease_lost_total", {{"cause", "other"}},
             static_cast<double>(s.lease_lost - std::min(s.lease_lost, s.lease_lost_by_watchdog)));
    w.Family("dsync_dispatch_cycles_total", "Dispatch cycles run, by result.", Type::kCounter);
    w.Sample("dsync_dispatch_cycles_total", {{"result", "ok"}},
             static_cast<double>(s.cycles - std::min(s.cycles, s.cycle_failures)));
    w.Sample("dsync_dispatch_cycles_total", {{"result", "failed"}}, static_cast<double>(s.cycle_failures));
    w.Family("dsync_dispatch_assigned_total", "Events assigned to a node.", Type::kCounter);
    w.Sample("dsync_dispatch_assigned_total", none, static_cast<double>(s.assigned));
    w.Family("dsync_dispatch_lost_races_total", "Assignments whose event changed since it was read.", Type::kCounter);
    w.Sample("dsync_dispatch_lost_races_total", none, static_cast<double>(s.lost_races));
    w.Family("dsync_dispatch_fenced_out_total", "Cycles whose writes the lease fence refused.", Type::kCounter);
    w.Sample("dsync_dispatch_fenced_out_total", none, static_cast<double>(s.fenced_out));
    w.Family("dsync_dispatch_latency_seconds", "From an event being due to its assignment to a node.",
             Type::kHistogram);
    w.Histogram("dsync_dispatch_latency_seconds", none, s.dispatch_latency);
    w.Family("dsync_dispatch_cycle_duration_seconds", "Duration of a dispatch cycle.", Type::kHistogram);
    w.Histogram("dsync_dispatch_cycle_duration_seconds", none, s.cycle_duration);
    w.Family("dsync_events_unroutable",
             "PENDING events of a topic no live node can run (none serves it, reaches its datasources, or "
             "could build its plan), at the leader's last check; reasons in v_events_needing_attention.",
             Type::kGauge);
    for (const auto& [topic, u] : s.unroutable) {
      w.Sample("dsync_events_unroutable", {{"topic", topic}}, static_cast<double>(u.pending));
    }
    w.Family("dsync_sweeps_total", "Sweeper passes, by result.", Type::kCounter);
    w.Sample("dsync_sweeps_total", {{"result", "ok"}}, static_cast<double>(s.sweeps - std::min(s.sweeps, s.sweep_failures)));
    w.Sample("dsync_sweeps_total", {{"result", "failed"}}, static_cast<double>(s.sweep_failures));
    w.Family("dsync_nodes_marked_offline_total", "Nodes the sweeper marked offline.", Type::kCounter);
    w.Sample("dsync_nodes_marked_offline_total", none, static_cast<double>(s.nodes_marked_offline));
    w.Family("dsync_event_reset_races_total", "Resets skipped because the event changed since it was read.",
             Type::kCounter);
    w.Sample("dsync_event_reset_races_total", none, static_cast<double>(s.reset_races));
    resets.emplace_back("node_offline", s.resets_node_offline);
    resets.emplace_back("timed_out", s.resets_timed_out);
    resets.emplace_back("not_claimed", s.resets_not_claimed);
  }
  if (sources_.consumer != nullptr) {
    consumer::ConsumerStats& c = *sources_.consumer;
    w.Family("dsync_consumer_polls_total", "Polls for assigned events.", Type::kCounter);
    w.Sample("dsync_consumer_polls_total", none, static_cast<double>(c.polls.load()));
    w.Family("dsync_consumer_polled_events_total", "Assigned events taken up by this node.", Type::kCounter);
    w.Sample("dsync_consumer_polled_events_total", none, static_cast<double>(c.polled_events.load()));
    w.Family("dsync_consumer_in_flight_events", "Events queued or running on this node.", Type::kGauge);
    w.Sample("dsync_consumer_in_flight_events", none, c.in_flight.load());
    resets.emplace_back("node_restarted", c.handed_back_at_start.load());
    resets.emplace_back("node_drained", c.handed_back_at_drain.load());
    resets.emplace_back("run_abandoned", c.handed_back_abandoned.load());
  }
  if (!resets.empty()) {
    w.Family("dsync_event_resets_total", "Events handed back to PENDING, by reason.", Type::kCounter);
    for (const auto& [reason, n] : resets) {
      w.Sample("dsync_event_resets_total", {{"reason", reason}}, static_cast<double>(n));
    }
  }
  if (sources_.saga != nullptr) {
    saga::SagaStats& s = *sources_.saga;
    w.Family("dsync_events_claimed_total", "Claims tried by this node's saga engine, by result.", Type::kCounter);
    w.Sample("dsync_events_claimed_total", {{"result", "claimed"}}, static_cast<double>(s.claimed.load()));
    w.Sample("dsync_events_claimed_total", {{"result", "not_claimed"}}, static_cast<double>(s.not_claimed.load()));
    w.Family("dsync_event_runs_total", "Runs of claimed events, by where they left the event.", Type::kCounter);
    w.Sample("dsync_event_runs_total", {{"outcome", "succeeded"}}, static_cast<double>(s.succeeded.load()));
    w.Sample("dsync_event_runs_total", {{"outcome", "retry_scheduled"}}, static_cast<double>(s.retries.load()));
    w.Sample("dsync_event_runs_total", {{"outcome", "compensated"}}, static_cast<double>(s.compensated.load()));
    w.Sample("dsync_event_runs_total", {{"outcome", "failed"}}, static_cast<double>(s.failed.load()));
    w.Sample("dsync_event_runs_total", {{"outcome", "lost_ownership"}}, static_cast<double>(s.lost_ownership.load()));
    w.Family("dsync_compensations_total", "Events whose compensation started on this node.", Type::kCounter);
    w.Sample("dsync_compensations_total", none, static_cast<double>(s.compensations_started.load()));
    w.Family("dsync_steps_total", "Step handler invocations, by action.", Type::kCounter);
    w.Sample("dsync_steps_total", {{"action", "execute"}}, static_cast<double>(s.steps_executed.load()));
    w.Sample("dsync_steps_total", {{"action", "compensate"}}, static_cast<double>(s.steps_compensated.load()));
    w.Family("dsync_claim_latency_seconds", "From an event's assignment to its claim (ASSIGNED -> RUNNING).",
             Type::kHistogram);
    w.Histogram("dsync_claim_latency_seconds", none, s.claim_latency.snapshot());
    w.Family("dsync_step_duration_seconds", "Step handler run time, by action.", Type::kHistogram);
    w.Histogram("dsync_step_duration_seconds", {{"action", "execute"}}, s.step_duration.snapshot());
    w.Histogram("dsync_step_duration_seconds", {{"action", "compensate"}}, s.compensation_duration.snapshot());
  }

  w.Family("dsync_http_requests_total", "HTTP requests served, by route, method and status code.", Type::kCounter);
  for (const auto& [labels, n] : stats_.requests.snapshot()) {
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
    w.Histogram("dsync_http_request_duration_seconds", labels, stats_.duration[r].snapshot());
  }
  w.Family("dsync_http_open_streams", "Open server-sent-event streams.", Type::kGauge);
  w.Sample("dsync_http_open_streams", none, stats_.open_streams.load());
  return w.str();
}

}  // namespace dsync::api
