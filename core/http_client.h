// A small HTTP/1.1 client for calls that must never outlive their deadline: the
// `http` step type's transport (saga/steps/http_step.h).
//
//   HttpClient client({.verify_peer = true});
//   HttpResponse r = client.Send({.method = "POST", .url = "https://svc.local/hook",
//                                 .headers = {{"Idempotency-Key", key}}, .body = json},
//                                deadline, stop, {.max_body_bytes = 1 << 20});
//   if (r.failure == HttpResponse::Failure::kNone && r.status / 100 == 2) use(r.body);
//
// Why not Poco's HTTPClientSession: its timeouts are per receive, so a peer sending one
// byte a second keeps a call alive for ever, and its reads are not bounded in size.
// Here every wait is a poll() bounded by what is left of the one deadline of the whole
// call (connect, TLS handshake, request, redirects, response), the stop token is looked
// at every 100 ms (the caller's still_wanted() every 2 s), a response body longer than
// max_body_bytes ends the call (its Content-Length is checked before reading), headers
// are bounded too, and redirects are
// followed at most max_redirects times and only within the same origin (scheme, host
// and port: headers that carry secrets never go to another host).
//
// One connection per call (Connection: close). http and https only; https verifies the
// peer's certificate chain (the system's CAs, or ca_file) and name by default
// (OpenSSL). Name resolution uses getaddrinfo, bounded by the resolver's own timeouts
// (resolv.conf), not by the deadline. The body may be sent Content-Length or chunked.
// SIGPIPE is never raised: plain sends use MSG_NOSIGNAL, TLS writes run with SIGPIPE
// blocked on the calling thread.
//
// Thread safety: an HttpClient may Send on many threads at once (its TLS context is
// only read after construction).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

namespace dsync {

// An http(s) URL taken apart. ParseHttpUrl returns nullopt (and `error`) for anything
// else: another scheme, user info, no host, a bad port, spaces or control characters.
struct HttpUrl {
  std::string scheme;  // "http" | "https"
  std::string host;    // without brackets for IPv6 literals
  int port = 0;
  std::string target;  // path and query, starting with '/'
  std::string Origin() const { return scheme + "://" + host + ":" + std::to_string(port); }
};
std::optional<HttpUrl> ParseHttpUrl(const std::string& url, std::string& error);

struct HttpRequest {
  std::string method = "POST";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;  // no CR/LF in names or values
  std::string body;
  std::string content_type = "application/json";
};

struct HttpLimits {
  size_t max_body_bytes = 1 << 20;    // a longer response body fails the call (kTooLarge)
  size_t max_header_bytes = 64 << 10;
  int max_redirects = 5;
};

struct HttpResponse {
  enum class Failure {
    kNone,       // a complete response: status, headers, body
    kBadRequest, // the request itself (URL, header) is unusable
    kConnect,    // resolving, connecting, or the connection broke
    kTls,        // handshake or certificate verification failed
    kTimeout,    // the deadline passed
    kStopped,    // the stop token fired
    kTooLarge,   // body or headers longer than the limits
    kProtocol,   // not HTTP/1.x, malformed headers or chunks
    kRedirects,  // more than max_redirects, or a redirect to another origin
    kUnwanted,   // still_wanted() returned false (the caller lost the event)
  };
  Failure failure = Failure::kNone;
  std::string error;  // one line when failure != kNone
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::string final_url;  // after redirects
  // The first header of that (lower-case) name; "" when absent.
  std::string Header(const std::string& lower_name) const;
};

struct TlsOptions {
  bool verify_peer = true;  // false: no certificate or name check (tests, never by default)
  std::string ca_file;      // PEM bundle to trust instead of the system's CAs ("" = system)
};

class HttpClient {
 public:
  // Throws std::runtime_error when the TLS context cannot be set up (e.g. ca_file unreadable).
  explicit HttpClient(TlsOptions tls = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // `still_wanted`, when given, is called on this thread about every `check_every`
  // while the call waits; false ends the call (kUnwanted).
  HttpResponse Send(const HttpRequest& request, std::chrono::steady_clock::time_point deadline,
                    std::stop_token stop, const HttpLimits& limits = {},
                    const std::function<bool()>& still_wanted = nullptr,
                    std::chrono::milliseconds check_every = std::chrono::milliseconds(2000)) const;

 private:
  struct Tls;
  std::unique_ptr<Tls> tls_;
};

// Retry-After as a delay: delta-seconds ("120") or an HTTP date (against the system
// clock); nullopt when absent or unreadable. Never negative.
std::optional<std::chrono::milliseconds> ParseRetryAfter(const std::string& value);

}  // namespace dsync
