#include "core/http_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <stdexcept>

namespace dsync {
namespace {

using SteadyClock = std::chrono::steady_clock;
using Failure = HttpResponse::Failure;

constexpr int kHttpPollSliceMs = 100;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool HasCtl(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7F; });
}

std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown TLS error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

// SIGPIPE blocked on this thread while it lives; a SIGPIPE raised meanwhile is taken
// off the thread's pending set before the old mask comes back.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &s, &old_);
  }
  ~SigpipeBlock() {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) {
      sigset_t s;
      sigemptyset(&s);
      sigaddset(&s, SIGPIPE);
      timespec zero{0, 0};
      sigtimedwait(&s, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
};

// Incremental decoder of a chunked body, fed as bytes arrive.
class ChunkDecoder {
 public:
  // Appends decoded bytes to `body`. Returns false with `error` on malformed input.
  bool Feed(std::string_view data, std::string& body, size_t max_body, std::string& error, bool& too_large) {
    pending_.append(data);
    size_t pos = 0;
    while (state_ != kDone) {
      if (state_ == kSize || state_ == kTrailer || state_ == kDataEnd) {
        size_t nl = pending_.find("\r\n", pos);
        if (nl == std::string::npos) {
          if (pending_.size() - pos > 4096) {
            error = "a chunk size or trailer line longer than 4096 bytes";
            return false;
          }
          break;
        }
        std::string line = pending_.substr(pos, nl - pos);
        pos = nl + 2;
        if (state_ == kDataEnd) {
          if (!line.empty()) {
            error = "a chunk not followed by CRLF";
            return false;
          }
          state_ = kSize;
        } else if (state_ == kSize) {
          std::string hex = line.substr(0, line.find(';'));
          hex = Trim(hex);
          if (hex.empty() || hex.size() > 15 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
            error = "a malformed chunk size";
            return false;
          }
          left_ = std::stoull(hex, nullptr, 16);
          if (left_ == 0) {
            state_ = kTrailer;
          } else {
            if (body.size() + left_ > max_body) {
              too_large = true;
              return false;
            }
            state_ = kData;
          }
        } else {  // trailer lines until an empty one
          if (line.empty()) state_ = kDone;
        }
      } else {  // kData
        size_t take = std::min<size_t>(left_, pending_.size() - pos);
        if (take == 0) break;
        body.append(pending_, pos, take);
        pos += take;
        left_ -= take;
        if (left_ == 0) state_ = kDataEnd;
      }
    }
    pending_.erase(0, pos);
    return true;
  }
  bool done() const { return state_ == kDone; }

 private:
  enum State { kSize, kData, kDataEnd, kTrailer, kDone };
  State state_ = kSize;
  uint64_t left_ = 0;
  std::string pending_;
};

}  // namespace

struct HttpClient::Tls {
  SSL_CTX* ctx = nullptr;
  ~Tls() {
    if (ctx) SSL_CTX_free(ctx);
  }
};

std::optional<HttpUrl> ParseHttpUrl(const std::string& url, std::string& error) {
  HttpUrl u;
  size_t sep = url.find("://");
  if (sep == std::string::npos) {
    error = "is not an absolute http:// or https:// URL";
    return std::nullopt;
  }
  u.scheme = Lower(url.substr(0, sep));
  if (u.scheme != "http" && u.scheme != "https") {
    error = "has scheme '" + u.scheme.substr(0, 20) + "': only http and https are allowed";
    return std::nullopt;
  }
  if (HasCtl(url) || url.find(' ') != std::string::npos) {
    error = "holds spaces or control characters";
    return std::nullopt;
  }
  size_t auth_begin = sep + 3;
  size_t auth_end = url.find_first_of("/?#", auth_begin);
  std::string authority = url.substr(auth_begin, auth_end == std::string::npos ? std::string::npos : auth_end - auth_begin);
  if (authority.find('@') != std::string::npos) {
    error = "holds user info (user:password@): put credentials in a header with ${ENV_NAME}";
    return std::nullopt;
  }
  std::string port_text;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string::npos) {
      error = "has an unclosed [IPv6] host";
      return std::nullopt;
    }
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') {
        error = "has characters after its [IPv6] host";
        return std::nullopt;
      }
      port_text = authority.substr(close + 2);
    }
  } else {
    size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) port_text = authority.substr(colon + 1);
  }
  if (u.host.empty()) {
    error = "has no host";
    return std::nullopt;
  }
  u.port = u.scheme == "https" ? 443 : 80;
  if (!port_text.empty()) {
    if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port_text) < 1 || std::stoi(port_text) > 65535) {
      error = "has a bad port '" + port_text.substr(0, 10) + "'";
      return std::nullopt;
    }
    u.port = std::stoi(port_text);
  }
  u.target = auth_end == std::string::npos ? "/" : url.substr(auth_end);
  size_t hash = u.target.find('#');
  if (hash != std::string::npos) u.target.resize(hash);  // a fragment is not sent
  if (u.target.empty() || u.target[0] != '/') u.target = "/" + u.target;
  return u;
}

std::string HttpResponse::Header(const std::string& lower_name) const {
  for (const auto& [k, v] : headers) {
    if (k == lower_name) return v;
  }
  return "";
}

std::optional<std::chrono::milliseconds> ParseRetryAfter(const std::string& raw) {
  std::string value = Trim(raw);
  if (value.empty()) return std::nullopt;
  if (value.find_first_not_of("0123456789") == std::string::npos) {
    if (value.size() > 9) return std::chrono::milliseconds(int64_t{999'999'999} * 1000);
    return std::chrono::milliseconds(std::stoll(value) * 1000);
  }
  tm t{};
  const char* end = strptime(value.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &t);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const time_t when = timegm(&t);
  const time_t now = time(nullptr);
  return std::chrono::milliseconds(std::max<int64_t>(0, static_cast<int64_t>(when - now)) * 1000);
}

HttpClient::HttpClient(TlsOptions options) : tls_(std::make_unique<Tls>()) {
  tls_->ctx = SSL_CTX_new(TLS_client_method());
  if (tls_->ctx == nullptr) throw std::runtime_error("TLS context: " + OpenSslError());
  SSL_CTX_set_min_proto_version(tls_->ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(tls_->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (options.verify_peer) {
    SSL_CTX_set_verify(tls_->ctx, SSL_VERIFY_PEER, nullptr);
    int ok = options.ca_file.empty() ? SSL_CTX_set_default_verify_paths(tls_->ctx)
                                     : SSL_CTX_load_verify_locations(tls_->ctx, options.ca_file.c_str(), nullptr);
    if (ok != 1) throw std::runtime_error("TLS trust store " + options.ca_file + ": " + OpenSslError());
  } else {
    SSL_CTX_set_verify(tls_->ctx, SSL_VERIFY_NONE, nullptr);
  }
}

HttpClient::~HttpClient() = default;

namespace {

// One call's connection: a non-blocking socket, optionally wrapped in TLS, whose every
// wait is bounded by the call's deadline and stop token.
class HttpConn {
 public:
  HttpConn(SteadyClock::time_point deadline, std::stop_token stop, const std::function<bool()>& still_wanted,
           std::chrono::milliseconds check_every)
      : deadline_(deadline), stop_(std::move(stop)), still_wanted_(still_wanted), check_every_(check_every),
        next_check_(SteadyClock::now() + check_every) {}
  ~HttpConn() {
    if (ssl_) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
  }

  Failure failure = Failure::kNone;
  std::string error;

  bool Fail(Failure f, std::string why) {
    failure = f;
    error = std::move(why);
    return false;
  }

  // Waits until `events` are ready; false (failure set) at the deadline or a stop.
  bool Wait(short events) {
    while (true) {
      if (stop_.stop_requested()) return Fail(Failure::kStopped, "stopped (the step's deadline, a drain or a shutdown)");
      const auto now = SteadyClock::now();
      if (now >= deadline_) return Fail(Failure::kTimeout, "no complete answer before the deadline");
      if (still_wanted_ && now >= next_check_) {
        next_check_ = now + check_every_;
        if (!still_wanted_()) return Fail(Failure::kUnwanted, "abandoned: this node no longer owns the event");
      }
      // Rounded up: a wait never ends before the deadline it stops at.
      const int64_t left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - now).count();
      pollfd p{fd_, events, 0};
      int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kHttpPollSliceMs)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return Fail(Failure::kConnect, std::string("poll: ") + std::strerror(errno));
    }
  }

  bool Connect(const HttpUrl& url, SSL_CTX* tls) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(url.host.c_str(), std::to_string(url.port).c_str(), &hints, &res);
    if (rc != 0) return Fail(Failure::kConnect, "cannot resolve " + url.host + ": " + gai_strerror(rc));
    std::string last = "no address";
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
        fd_ = fd;
        if (!Wait(POLLOUT)) {
          ::freeaddrinfo(res);
          return false;
        }
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) break;
        last = std::strerror(err);
      } else {
        last = std::strerror(errno);
      }
      ::close(fd);
      fd_ = -1;
    }
    ::freeaddrinfo(res);
    if (fd_ < 0) return Fail(Failure::kConnect, "cannot connect to " + url.host + ":" + std::to_string(url.port) + ": " + last);
    if (url.scheme == "https") return Handshake(url, tls);
    return true;
  }

  bool Handshake(const HttpUrl& url, SSL_CTX* tls) {
    ssl_ = SSL_new(tls);
    if (ssl_ == nullptr) return Fail(Failure::kTls, "TLS: " + OpenSslError());
    SSL_set_fd(ssl_, fd_);
    in6_addr ip{};
    const bool literal = ::inet_pton(AF_INET, url.host.c_str(), &ip) == 1 || ::inet_pton(AF_INET6, url.host.c_str(), &ip) == 1;
    if (literal) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), url.host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl_, url.host.c_str());
      SSL_set1_host(ssl_, url.host.c_str());
    }
    SigpipeBlock no_sigpipe;
    while (true) {
      ERR_clear_error();
      int r = SSL_connect(ssl_);
      if (r == 1) return true;
      int e = SSL_get_error(ssl_, r);
      if (e == SSL_ERROR_WANT_READ) {
        if (!Wait(POLLIN)) return false;
      } else if (e == SSL_ERROR_WANT_WRITE) {
        if (!Wait(POLLOUT)) return false;
      } else {
        long verify = SSL_get_verify_result(ssl_);
        if (verify != X509_V_OK) {
          return Fail(Failure::kTls, std::string("TLS certificate not accepted: ") +
                                         X509_verify_cert_error_string(verify));
        }
        return Fail(Failure::kTls, "TLS handshake failed: " + OpenSslError());
      }
    }
  }

  bool WriteAll(const std::string& data) {
    size_t done = 0;
    std::optional<SigpipeBlock> no_sigpipe;
    if (ssl_) no_sigpipe.emplace();
    while (done < data.size()) {
      if (ssl_) {
        ERR_clear_error();
        int n = SSL_write(ssl_, data.data() + done, static_cast<int>(std::min<size_t>(data.size() - done, 1 << 20)));
        if (n > 0) {
          done += static_cast<size_t>(n);
          continue;
        }
        int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_WANT_WRITE) {
          if (!Wait(POLLOUT)) return false;
        } else if (e == SSL_ERROR_WANT_READ) {
          if (!Wait(POLLIN)) return false;
        } else {
          return Fail(Failure::kConnect, "TLS write failed: " + OpenSslError());
        }
      } else {
        ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n > 0) {
          done += static_cast<size_t>(n);
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          if (!Wait(POLLOUT)) return false;
        } else if (n < 0 && errno == EINTR) {
          continue;
        } else {
          return Fail(Failure::kConnect, std::string("send: ") + std::strerror(errno));
        }
      }
    }
    return true;
  }

  // Reads some bytes into `buf`: >0 bytes, 0 at EOF, -1 on failure (set).
  ssize_t ReadSome(char* buf, size_t size) {
    while (true) {
      if (ssl_) {
        ERR_clear_error();
        int n = SSL_read(ssl_, buf, static_cast<int>(size));
        if (n > 0) return n;
        int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        if (e == SSL_ERROR_WANT_READ) {
          if (!Wait(POLLIN)) return -1;
        } else if (e == SSL_ERROR_WANT_WRITE) {
          if (!Wait(POLLOUT)) return -1;
        } else if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
          return 0;  // the peer closed without close_notify: EOF as far as framing goes
        } else {
          Fail(Failure::kConnect, "TLS read failed: " + OpenSslError());
          return -1;
        }
      } else {
        ssize_t n = ::recv(fd_, buf, size, 0);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (!Wait(POLLIN)) return -1;
          continue;
        }
        Fail(Failure::kConnect, std::string("recv: ") + std::strerror(errno));
        return -1;
      }
    }
  }

 private:
  const SteadyClock::time_point deadline_;
  const std::stop_token stop_;
  const std::function<bool()>& still_wanted_;
  const std::chrono::milliseconds check_every_;
  SteadyClock::time_point next_check_;
  int fd_ = -1;
  SSL* ssl_ = nullptr;
};

// One request/response exchange on a fresh connection.
HttpResponse Exchange(const HttpUrl& url, const std::string& method, const HttpRequest& req, bool send_body,
                      SteadyClock::time_point deadline, const std::stop_token& stop, const HttpLimits& limits,
                      SSL_CTX* tls, const std::function<bool()>& still_wanted, std::chrono::milliseconds check_every) {
  HttpResponse resp;
  HttpConn conn(deadline, stop, still_wanted, check_every);
  auto failed = [&] {
    resp.failure = conn.failure;
    resp.error = conn.error;
    return resp;
  };
  if (!conn.Connect(url, tls)) return failed();
  const bool default_port = (url.scheme == "http" && url.port == 80) || (url.scheme == "https" && url.port == 443);
  const bool v6 = url.host.find(':') != std::string::npos;
  std::string host = v6 ? "[" + url.host + "]" : url.host;
  if (!default_port) host += ":" + std::to_string(url.port);
  std::string head = method + " " + url.target + " HTTP/1.1\r\nHost: " + host +
                     "\r\nUser-Agent: dsync\r\nAccept: application/json, */*;q=0.5\r\nConnection: close\r\n";
  for (const auto& [k, v] : req.headers) head += k + ": " + v + "\r\n";
  if (send_body) {
    head += "Content-Type: " + req.content_type + "\r\nContent-Length: " + std::to_string(req.body.size()) + "\r\n";
  } else if (method != "GET" && method != "HEAD") {
    head += "Content-Length: 0\r\n";
  }
  head += "\r\n";
  if (send_body) head += req.body;
  if (!conn.WriteAll(head)) return failed();

  // Headers.
  std::string raw;
  char buf[16384];
  size_t header_end = std::string::npos;
  while (true) {
    while (true) {  // skip 1xx interim responses
      header_end = raw.find("\r\n\r\n");
      if (header_end == std::string::npos) break;
      if (raw.compare(0, 10, "HTTP/1.1 1") == 0 || raw.compare(0, 10, "HTTP/1.0 1") == 0) {
        raw.erase(0, header_end + 4);
        continue;
      }
      break;
    }
    if (header_end != std::string::npos) break;
    if (raw.size() > limits.max_header_bytes) {
      resp.failure = Failure::kTooLarge;
      resp.error = "response headers longer than " + std::to_string(limits.max_header_bytes) + " bytes";
      return resp;
    }
    ssize_t n = conn.ReadSome(buf, sizeof buf);
    if (n < 0) return failed();
    if (n == 0) {
      resp.failure = raw.empty() ? Failure::kConnect : Failure::kProtocol;
      resp.error = raw.empty() ? "the connection closed without an answer" : "the connection closed inside the headers";
      return resp;
    }
    raw.append(buf, static_cast<size_t>(n));
  }
  if (header_end > limits.max_header_bytes) {
    resp.failure = Failure::kTooLarge;
    resp.error = "response headers longer than " + std::to_string(limits.max_header_bytes) + " bytes";
    return resp;
  }
  // Status line and header fields.
  size_t line_end = raw.find("\r\n");
  const std::string status_line = raw.substr(0, line_end);
  if (status_line.size() < 12 || status_line.compare(0, 7, "HTTP/1.") != 0 || status_line[8] != ' ' ||
      !std::isdigit(static_cast<unsigned char>(status_line[9])) || !std::isdigit(static_cast<unsigned char>(status_line[10])) ||
      !std::isdigit(static_cast<unsigned char>(status_line[11]))) {
    resp.failure = Failure::kProtocol;
    resp.error = "not an HTTP/1.x response";
    return resp;
  }
  resp.status = std::stoi(status_line.substr(9, 3));
  size_t pos = line_end + 2;
  while (pos < header_end) {
    size_t e = raw.find("\r\n", pos);
    std::string line = raw.substr(pos, e - pos);
    pos = e + 2;
    size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) {
      resp.failure = Failure::kProtocol;
      resp.error = "a malformed response header line";
      return resp;
    }
    resp.headers.emplace_back(Lower(line.substr(0, colon)), Trim(line.substr(colon + 1)));
  }
  std::string rest = raw.substr(header_end + 4);

  // Body.
  const bool no_body = method == "HEAD" || resp.status == 204 || resp.status == 304;
  if (no_body) return resp;
  const bool chunked = Lower(resp.Header("transfer-encoding")).find("chunked") != std::string::npos;
  std::optional<uint64_t> length;
  if (!chunked && !resp.Header("content-length").empty()) {
    const std::string cl = resp.Header("content-length");
    if (cl.size() > 18 || cl.find_first_not_of("0123456789") != std::string::npos) {
      resp.failure = Failure::kProtocol;
      resp.error = "a malformed Content-Length";
      return resp;
    }
    length = std::stoull(cl);
    if (*length > limits.max_body_bytes) {
      resp.failure = Failure::kTooLarge;
      resp.error = "response body of " + cl + " bytes is over the limit of " + std::to_string(limits.max_body_bytes) +
                   " bytes (not read)";
      return resp;
    }
  }
  auto too_large = [&] {
    resp.failure = Failure::kTooLarge;
    resp.body.clear();
    resp.error = "response body longer than the limit of " + std::to_string(limits.max_body_bytes) + " bytes (cut off)";
    return resp;
  };
  ChunkDecoder chunks;
  std::string chunk_error;
  bool chunk_too_large = false;
  auto take = [&](std::string_view data) {
    if (chunked) return chunks.Feed(data, resp.body, limits.max_body_bytes, chunk_error, chunk_too_large);
    if (resp.body.size() + data.size() > limits.max_body_bytes) {
      chunk_too_large = true;
      return false;
    }
    resp.body.append(data);
    return true;
  };
  auto complete = [&] { return chunked ? chunks.done() : length && resp.body.size() >= *length; };
  if (!take(rest)) {
    if (chunk_too_large) return too_large();
    resp.failure = Failure::kProtocol;
    resp.error = "a malformed chunked body: " + chunk_error;
    return resp;
  }
  while (!complete()) {
    ssize_t n = conn.ReadSome(buf, sizeof buf);
    if (n < 0) {
      resp.body.clear();
      return failed();
    }
    if (n == 0) {
      if (!chunked && !length) break;  // delimited by EOF
      resp.failure = Failure::kConnect;
      resp.error = "the connection closed before the body was complete";
      resp.body.clear();
      return resp;
    }
    if (!take(std::string_view(buf, static_cast<size_t>(n)))) {
      if (chunk_too_large) return too_large();
      resp.failure = Failure::kProtocol;
      resp.error = "a malformed chunked body: " + chunk_error;
      resp.body.clear();
      return resp;
    }
  }
  if (length && resp.body.size() > *length) resp.body.resize(*length);
  return resp;
}

}  // namespace

HttpResponse HttpClient::Send(const HttpRequest& req, SteadyClock::time_point deadline, std::stop_token stop,
                              const HttpLimits& limits, const std::function<bool()>& still_wanted,
                              std::chrono::milliseconds check_every) const {
  HttpResponse bad;
  bad.failure = Failure::kBadRequest;
  std::string why;
  std::optional<HttpUrl> url = ParseHttpUrl(req.url, why);
  if (!url) {
    bad.error = "the URL " + why;
    return bad;
  }
  for (const auto& [k, v] : req.headers) {
    if (k.empty() || HasCtl(k) || k.find(':') != std::string::npos || k.find(' ') != std::string::npos ||
        HasCtl(v)) {
      bad.error = "header '" + (HasCtl(k) ? std::string("?") : k) + "' holds characters a header may not hold";
      return bad;
    }
  }
  const HttpUrl origin = *url;
  std::string method = req.method;
  bool send_body = method != "GET" && method != "HEAD";
  for (int redirects = 0;; ++redirects) {
    HttpResponse r = Exchange(*url, method, req, send_body, deadline, stop, limits, tls_->ctx, still_wanted, check_every);
    r.final_url = url->scheme + "://" + url->host + ":" + std::to_string(url->port) + url->target;
    const bool redirect = r.failure == Failure::kNone &&
                          (r.status == 301 || r.status == 302 || r.status == 303 || r.status == 307 || r.status == 308) &&
                          !r.Header("location").empty();
    if (!redirect) return r;
    if (redirects >= limits.max_redirects) {
      r.failure = Failure::kRedirects;
      r.error = "more than " + std::to_string(limits.max_redirects) + " redirects (a redirect loop?)";
      return r;
    }
    std::string location = r.Header("location");
    HttpUrl next;
    if (location.rfind("http://", 0) == 0 || location.rfind("https://", 0) == 0 ||
        location.rfind("HTTP://", 0) == 0 || location.rfind("HTTPS://", 0) == 0) {
      std::optional<HttpUrl> parsed = ParseHttpUrl(location, why);
      if (!parsed) {
        r.failure = Failure::kRedirects;
        r.error = "a redirect whose Location " + why;
        return r;
      }
      next = *parsed;
    } else if (!location.empty() && location[0] == '/' && (location.size() < 2 || location[1] != '/') &&
               !HasCtl(location) && location.find(' ') == std::string::npos) {
      next = *url;
      next.target = location;
    } else {
      r.failure = Failure::kRedirects;
      r.error = "a redirect to a Location that is neither an http(s) URL nor an absolute path";
      return r;
    }
    if (next.Origin() != origin.Origin()) {
      r.failure = Failure::kRedirects;
      r.error = "a redirect to another origin (" + next.scheme + "://" + next.host + ":" + std::to_string(next.port) +
                ") is not followed";
      return r;
    }
    if (r.status == 303) {
      method = "GET";
      send_body = false;
    }
    *url = next;
  }
}

}  // namespace dsync
