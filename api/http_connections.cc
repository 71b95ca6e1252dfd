#include "api/http_connections.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "api/http_text.h"

namespace dsync::api {

using std::chrono::milliseconds;

namespace {

// After refusing a request whose body was announced: discard at most this much of it,
// for at most this long, so that closing does not reset the connection before the
// client has read the answer. The body itself is never read.
constexpr size_t kLingerBytes = 256 * 1024;
constexpr milliseconds kLingerTime{1000};
constexpr size_t kReadChunk = 65536;

bool IsBodyMethod(const std::string& m) { return m == "POST" || m == "PUT" || m == "PATCH"; }

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

struct HttpConnections::Connection {
  enum class Phase { kIdle, kHead, kBody, kLinger };
  int fd = -1;
  Phase phase = Phase::kIdle;
  Clock::TimePoint since;     // start of the phase
  Clock::TimePoint deadline;  // end of the phase
  std::string in;              // received, not yet consumed
  HttpRequest request;
  int64_t body_left = 0;       // Content-Length bodies
  ChunkedDecoder chunks;
  size_t lingered = 0;
  bool closed = false;

  ~Connection() { CloseFd(fd); }
  void StartIdle(Clock::TimePoint now, milliseconds idle) {
    phase = Phase::kIdle;
    since = now;
    deadline = now + idle;
    request = HttpRequest{};
    body_left = 0;
    chunks = ChunkedDecoder{};
  }
};

// ---- HttpResponder ------------------------------------------------------------------

bool HttpResponder::WriteAll(std::string_view data) {
  if (failed_) return false;
  const auto deadline = clock_.Now() + write_timeout_;
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - clock_.Now()).count();
      pollfd p{fd_, POLLOUT, 0};
      if (left > 0 && ::poll(&p, 1, static_cast<int>(left)) > 0 && !(p.revents & (POLLERR | POLLNVAL))) continue;
    }
    failed_ = true;  // gone, reset, or stalled past write_timeout
    keep_alive_ = false;
    return false;
  }
  return true;
}

bool HttpResponder::Send(const HttpReply& reply) {
  HttpHeaders headers = reply.headers;
  headers.insert(headers.begin(), {"Content-Type", reply.content_type});
  headers.emplace_back("Content-Length", std::to_string(reply.body.size()));
  headers.emplace_back("Connection", keep_alive_ ? "keep-alive" : "close");
  started_ = true;
  std::string out = ResponseHead(reply.status, headers);
  out += reply.body;
  return WriteAll(out);
}

bool HttpResponder::Begin(int status, const std::string& content_type, const HttpHeaders& headers) {
  HttpHeaders all = headers;
  all.insert(all.begin(), {"Content-Type", content_type});
  all.emplace_back("Transfer-Encoding", "chunked");
  all.emplace_back("Connection", "close");
  keep_alive_ = false;
  started_ = true;
  chunked_ = true;
  return WriteAll(ResponseHead(status, all));
}

bool HttpResponder::Write(std::string_view data) {
  if (data.empty()) return !failed_;
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string chunk = size;
  chunk.append(data);
  chunk += "\r\n";
  return WriteAll(chunk);
}

void HttpResponder::End() {
  if (chunked_) WriteAll("0\r\n\r\n");
}

// ---- HttpConnections ----------------------------------------------------------------

HttpConnections::HttpConnections(HttpService& service, HttpConnectionOptions options, HttpConnectionStats& stats,
                                 Clock& clock)
    : service_(service), options_(options), stats_(stats), clock_(clock) {}

HttpConnections::~HttpConnections() { Stop(); }

void HttpConnections::Start(int listen_fd) {
  if (started_) throw std::logic_error("HttpConnections::Start called twice");
  listen_fd_ = listen_fd;
  ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  if (::pipe2(wake_fds_, O_NONBLOCK | O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("http: pipe: ") + std::strerror(errno));
  }
  started_ = true;
  for (int i = 0; i < std::max(1, options_.threads); ++i) workers_.emplace_back([this] { WorkerLoop(); });
  io_thread_ = std::thread([this] { IoLoop(); });
}

void HttpConnections::Stop() {
  if (!started_ || stopping_.exchange(true)) return;
  Wake();
  if (io_thread_.joinable()) io_thread_.join();  // the listener and idle connections are closed
  {
    std::lock_guard lock(mu_);
    workers_stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();  // queued requests were answered
  workers_.clear();
  stats_.open -= static_cast<int>(returned_.size());
  returned_.clear();
  CloseFd(wake_fds_[0]);
  CloseFd(wake_fds_[1]);
}

void HttpConnections::Wake() {
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fds_[1], &byte, 1);
}

void HttpConnections::IoLoop() {
  std::vector<pollfd> fds;
  Clock::TimePoint accept_paused_until{};
  while (!stopping_) {
    auto now = clock_.Now();
    {
      std::lock_guard lock(mu_);
      for (auto& c : returned_) {
        --in_workers_;
        connections_.push_back(std::move(c));
      }
      returned_.clear();
    }
    // A connection back from a worker may hold the next (pipelined) request already.
    for (size_t i = 0; i < connections_.size(); ++i) {
      Connection* c = connections_[i].get();
      if (c != nullptr && c->phase == Connection::Phase::kIdle && !c->in.empty() && !c->closed) Advance(*c, now);
    }
    std::erase_if(connections_, [](const auto& c) { return c == nullptr || c->closed; });

    fds.clear();
    fds.push_back({wake_fds_[0], POLLIN, 0});
    const bool accepting = now >= accept_paused_until;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    Clock::TimePoint next = now + milliseconds(1000);
    for (const auto& c : connections_) {
      fds.push_back({c->fd, POLLIN, 0});
      next = std::min(next, c->deadline);
    }
    if (!accepting) next = std::min(next, accept_paused_until);
    const auto wait = std::max<int64_t>(0, std::chrono::duration_cast<milliseconds>(next - now).count() + 1);
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(wait));
    if (ready < 0 && errno != EINTR) {
      spdlog::error("HTTP_POLL_FAILED err={}", std::strerror(errno));
      std::this_thread::sleep_for(milliseconds(10));
      continue;
    }
    now = clock_.Now();
    if (fds[0].revents & POLLIN) {
      char buf[256];
      while (::read(wake_fds_[0], buf, sizeof buf) > 0) {
      }
    }
    if (stopping_) break;
    // Connections first (their indexes match fds), then new ones. A connection handed
    // to a worker is not touched again here (its slot is empty).
    const size_t polled = connections_.size();
    for (size_t i = 0; i < polled; ++i) {
      Connection* c = connections_[i].get();
      if (c == nullptr || c->closed) continue;
      if (fds[i + 2].revents != 0 && OnReadable(*c, now)) continue;
      if (!c->closed && now >= c->deadline) Expire(*c, now);
    }
    // EMFILE and friends: no descriptor for a new connection; try again a little later
    // (the pending ones wait in the listen backlog).
    if ((fds[1].revents & POLLIN) && !Accept(now)) accept_paused_until = now + milliseconds(100);
    std::erase_if(connections_, [](const auto& c) { return c == nullptr || c->closed; });
  }
  CloseFd(listen_fd_);
  stats_.open -= static_cast<int>(connections_.size());
  connections_.clear();
}

bool HttpConnections::Accept(Clock::TimePoint now) {
  for (int i = 0; i < 64; ++i) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        spdlog::warn("HTTP_ACCEPT_FAILED err={} open_connections={}", std::strerror(errno), stats_.open.load());
        return false;
      }
      return true;  // EAGAIN: none left
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int busy;
    {
      std::lock_guard lock(mu_);
      busy = in_workers_;
    }
    if (static_cast<int>(connections_.size()) + busy >= options_.max_connections) {
      // Make room: the connection idle the longest, else the oldest still sending its head.
      Connection* victim = nullptr;
      for (auto phase : {Connection::Phase::kIdle, Connection::Phase::kLinger, Connection::Phase::kHead}) {
        for (auto& c : connections_) {
          if (!c->closed && c->phase == phase && (victim == nullptr || c->since < victim->since)) victim = c.get();
        }
        if (victim != nullptr) break;
      }
      if (victim == nullptr) {
        ::close(fd);
        stats_.evicted++;
        continue;
      }
      victim->closed = true;
      CloseFd(victim->fd);
      stats_.open--;
      stats_.evicted++;
    }
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->StartIdle(now, options_.idle_timeout);
    stats_.open++;
    stats_.accepted++;
    connections_.push_back(std::move(c));
  }
  return true;
}

bool HttpConnections::OnReadable(Connection& c, Clock::TimePoint now) {
  char buf[kReadChunk];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
      if (c.phase == Connection::Phase::kLinger) {
        c.lingered += static_cast<size_t>(n);
        if (c.lingered >= kLingerBytes) break;
        continue;
      }
      c.in.append(buf, static_cast<size_t>(n));
      if (Advance(c, now)) return true;  // a worker has it now: not touched again
      if (c.closed) return false;
      if (c.phase != Connection::Phase::kLinger && static_cast<size_t>(n) < sizeof buf) return false;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    break;  // EOF or error
  }
  c.closed = true;
  CloseFd(c.fd);
  stats_.open--;
  return false;
}

bool HttpConnections::Advance(Connection& c, Clock::TimePoint now) {
  using Phase = Connection::Phase;
  for (;;) {
    switch (c.phase) {
      case Phase::kLinger:
        c.in.clear();
        return false;
      case Phase::kIdle:
        while (c.in.starts_with("\r\n")) c.in.erase(0, 2);  // RFC 9112 2.2: tolerated before a request
        if (c.in.empty()) return false;
        c.phase = Phase::kHead;
        c.since = now;
        c.deadline = now + options_.header_timeout;
        [[fallthrough]];
      case Phase::kHead: {
        const size_t end = c.in.find("\r\n\r\n");
        if (end == std::string::npos || end + 4 > options_.max_header_bytes) {
          if (c.in.size() > options_.max_header_bytes || (end != std::string::npos)) {
            Refuse(c, {431, ErrorBody("the request line and headers exceed " +
                                      std::to_string(options_.max_header_bytes) + " bytes")},
                   true, now);
            service_.Refused(nullptr, 431);
          }
          return false;
        }
        try {
          c.request.head = ParseRequestHead(std::string_view(c.in).substr(0, end + 4));
        } catch (const HttpError& e) {
          c.in.erase(0, end + 4);
          Refuse(c, {e.status, ErrorBody(e.what())}, true, now);
          service_.Refused(nullptr, e.status);
          return false;
        }
        c.in.erase(0, end + 4);
        const HttpRequestHead& head = c.request.head;
        if (!head.chunked && !head.content_length && IsBodyMethod(head.method)) {
          Refuse(c, {411, ErrorBody("a " + head.method + " needs a Content-Length (or Transfer-Encoding: chunked)")},
                 true, now);
          service_.Refused(&head, 411);
          return false;
        }
        if (head.content_length.value_or(0) > options_.max_body_bytes) {
          Refuse(c, {413, ErrorBody("the request body is " + std::to_string(*head.content_length) +
                                    " bytes; the limit is " + std::to_string(options_.max_body_bytes) +
                                    " (api.max_body_bytes)")},
                 true, now);
          service_.Refused(&head, 413);
          return false;
        }
        if (std::optional<HttpReply> refusal = service_.Screen(head)) {
          // Without a body the connection can stay; with one, it closes unread.
          Refuse(c, *refusal, head.has_body() || !head.keep_alive, now);
          if (c.closed || c.phase == Phase::kLinger) return false;
          continue;  // kIdle again: a pipelined request may follow
        }
        if (head.expect_continue && head.has_body()) {
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          [[maybe_unused]] ssize_t n = ::send(c.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL);
        }
        c.phase = Phase::kBody;
        c.since = now;
        c.deadline = now + options_.body_timeout;
        c.body_left = head.chunked ? 0 : head.content_length.value_or(0);
        [[fallthrough]];
      }
      case Phase::kBody: {
        HttpRequest& r = c.request;
        if (r.head.chunked) {
          bool done;
          try {
            done = c.chunks.Feed(c.in, r.body);
          } catch (const HttpError& e) {
            Refuse(c, {e.status, ErrorBody(e.what())}, true, now);
            service_.Refused(&r.head, e.status);
            return false;
          }
          if (static_cast<int64_t>(r.body.size()) > options_.max_body_bytes) {
            Refuse(c, {413, ErrorBody("the request body exceeds " + std::to_string(options_.max_body_bytes) +
                                      " bytes (api.max_body_bytes)")},
                   true, now);
            service_.Refused(&r.head, 413);
            return false;
          }
          if (!done) return false;
        } else {
          const size_t take = static_cast<size_t>(std::min<int64_t>(c.body_left, static_cast<int64_t>(c.in.size())));
          r.body.append(c.in, 0, take);
          c.in.erase(0, take);
          c.body_left -= static_cast<int64_t>(take);
          if (c.body_left > 0) return false;
        }
        // Complete: a worker answers it. The connection leaves the I/O thread's set.
        auto slot = std::find_if(connections_.begin(), connections_.end(), [&c](const auto& p) { return p.get() == &c; });
        bool queued = false;
        if (slot != connections_.end()) {
          std::lock_guard lock(mu_);
          if (static_cast<int>(queue_.size()) < options_.max_queued) {
            ++in_workers_;
            queue_.push_back(std::move(*slot));
            queued = true;
          }
        }
        if (!queued) {
          Refuse(c, {503, ErrorBody("the server is busy; try again later")}, true, now);
          service_.Refused(&c.request.head, 503);
          return false;
        }
        work_cv_.notify_one();
        return true;
      }
    }
  }
}

void HttpConnections::Refuse(Connection& c, const HttpReply& reply, bool close, Clock::TimePoint now) {
  stats_.refused++;
  HttpHeaders headers = reply.headers;
  headers.insert(headers.begin(), {"Content-Type", reply.content_type});
  headers.emplace_back("Content-Length", std::to_string(reply.body.size()));
  headers.emplace_back("Cache-Control", "no-store");
  headers.emplace_back("X-Content-Type-Options", "nosniff");
  headers.emplace_back("Connection", close ? "close" : "keep-alive");
  const std::string out = ResponseHead(reply.status, headers) + reply.body;
  // Small, and the socket's buffer is empty or nearly: one non-blocking send. A client
  // that does not read its answers loses the connection.
  const ssize_t n = ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL);
  if (n != static_cast<ssize_t>(out.size())) close = true;
  if (!close) {
    c.StartIdle(now, options_.idle_timeout);
    return;
  }
  ::shutdown(c.fd, SHUT_WR);
  c.in.clear();
  c.phase = Connection::Phase::kLinger;
  c.since = now;
  c.deadline = now + kLingerTime;
  c.lingered = 0;
}

void HttpConnections::Expire(Connection& c, Clock::TimePoint now) {
  using Phase = Connection::Phase;
  switch (c.phase) {
    case Phase::kIdle: stats_.timed_out_idle++; break;
    case Phase::kHead:
      stats_.timed_out_head++;
      Refuse(c, {408, ErrorBody("the request line and headers took longer than " +
                                std::to_string(options_.header_timeout.count()) + " ms")},
             true, now);
      service_.Refused(nullptr, 408);
      break;
    case Phase::kBody:
      stats_.timed_out_body++;
      Refuse(c, {408, ErrorBody("the request body took longer than " + std::to_string(options_.body_timeout.count()) +
                                " ms")},
             true, now);
      service_.Refused(&c.request.head, 408);
      break;
    case Phase::kLinger: break;
  }
  c.closed = true;
  CloseFd(c.fd);
  stats_.open--;
}

void HttpConnections::WorkerLoop() {
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [this] { return !queue_.empty() || workers_stop_; });
      if (queue_.empty()) return;
      c = std::move(queue_.front());
      queue_.pop_front();
    }
    HttpResponder out(c->fd, c->request.head.keep_alive && !stopping_, options_.write_timeout, clock_);
    try {
      service_.Serve(c->request, out);
    } catch (const std::exception& e) {
      spdlog::error("HTTP_SERVE_FAILED err={}", e.what());
      out.Close();
    }
    const bool keep = out.keep_alive_ && !out.failed_ && !stopping_;
    std::lock_guard lock(mu_);
    if (keep && !workers_stop_) {
      c->StartIdle(clock_.Now(), options_.idle_timeout);
      returned_.push_back(std::move(c));
      Wake();
    } else {
      --in_workers_;
      c.reset();
      stats_.open--;
    }
  }
}

}  // namespace dsync::api
