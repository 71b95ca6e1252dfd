#include "core/wakeup.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <spdlog/spdlog.h>

namespace dsync::wakeup {
namespace {

// The receiving thread looks at most this many datagrams per wake of poll(): a flood
// is drained in bounded rounds, each costing one limiter decision per datagram.
constexpr int kDrainPerRound = 256;
// Remembered destinations; beyond this the cache starts over (addresses churn only
// when nodes do).
constexpr size_t kMaxTargets = 4096;

std::string FormatAddress(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
  return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
}

struct AddrInfoDeleter {
  void operator()(addrinfo* p) const { freeaddrinfo(p); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// getaddrinfo for a datagram endpoint; error text in `err` on failure.
AddrInfoPtr Resolve(const Endpoint& e, bool passive, std::string& err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const std::string port = std::to_string(e.port);
  int rc = getaddrinfo(e.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    err = gai_strerror(rc);
    return nullptr;
  }
  return AddrInfoPtr(res);
}

}  // namespace

std::optional<Endpoint> ParseEndpoint(std::string_view text, bool allow_port_zero) {
  Endpoint e;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') return std::nullopt;
    e.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    e.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  if (e.host.empty() || port.empty()) return std::nullopt;
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value > 65535) return std::nullopt;
  if (value == 0 && !allow_port_zero) return std::nullopt;
  e.port = static_cast<uint16_t>(value);
  return e;
}

// --- WakeLimiter ------------------------------------------------------------

WakeLimiter::WakeLimiter(Millis min_gap, Millis gap_after_nothing)
    : min_gap_(min_gap), gap_after_nothing_(gap_after_nothing) {}

WakeLimiter::TimePoint WakeLimiter::NextAllowed() const {
  TimePoint next{};
  if (acted_at_) next = *acted_at_ + min_gap_;
  if (wasted_at_) next = std::max(next, *wasted_at_ + gap_after_nothing_);
  // The latest poll found nothing and the one now running has not reported: hold
  // until it does (Result), at most one gap after it began.
  if (awaiting_result_ && !last_found_work_) next = std::max(next, *acted_at_ + gap_after_nothing_);
  return next;
}

void WakeLimiter::Act(TimePoint now) {
  acted_at_ = now;
  awaiting_result_ = true;
  pending_ = false;
}

bool WakeLimiter::Offer(TimePoint now) {
  if (now >= NextAllowed()) {
    Act(now);
    return true;
  }
  pending_ = true;
  return false;
}

std::optional<WakeLimiter::TimePoint> WakeLimiter::due() const {
  if (!pending_) return std::nullopt;
  return NextAllowed();
}

bool WakeLimiter::TakeDue(TimePoint now) {
  if (!pending_ || now < NextAllowed()) return false;
  Act(now);
  return true;
}

void WakeLimiter::Result(bool found_work) {
  if (!awaiting_result_) return;
  awaiting_result_ = false;
  last_found_work_ = found_work;
  if (!found_work) wasted_at_ = acted_at_;
}

// --- WakeListener -------------------------------------------------------------

std::unique_ptr<WakeListener> WakeListener::Bind(const std::string& listen, const std::string& who,
                                                 WakeLimiter limiter, Clock& clock) {
  auto disabled = [&](const std::string& why) {
    spdlog::warn("WAKEUP_DISABLED who=\"{}\" listen={} err=\"{}\" (polling only)", who, listen, why);
    return std::unique_ptr<WakeListener>();
  };
  std::optional<Endpoint> e = ParseEndpoint(listen, /*allow_port_zero=*/true);
  if (!e) return disabled("not HOST:PORT with a port 0-65535");
  std::string err;
  AddrInfoPtr res = Resolve(*e, /*passive=*/false, err);
  if (!res) return disabled("cannot resolve: " + err);
  for (addrinfo* ai = res.get(); ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = std::strerror(errno);
      continue;
    }
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = std::strerror(errno);  // EADDRINUSE: port taken; EADDRNOTAVAIL: not a local address
      close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    std::string address = FormatAddress(bound);
    spdlog::info("WAKEUP_LISTENING who=\"{}\" address={}", who, address);
    return std::unique_ptr<WakeListener>(new WakeListener(fd, std::move(address), who, limiter, clock));
  }
  return disabled(err);
}

WakeListener::WakeListener(int fd, std::string address, std::string who, WakeLimiter limiter, Clock& clock)
    : fd_(fd),
      notify_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      address_(std::move(address)),
      who_(std::move(who)),
      clock_(clock),
      limiter_(limiter) {}

WakeListener::~WakeListener() {
  Stop();
  if (notify_fd_ >= 0) close(notify_fd_);
}

void WakeListener::Start(std::function<void()> on_wake) {
  if (thread_.joinable() || fd_ < 0) return;
  on_wake_ = std::move(on_wake);
  thread_ = std::jthread([this](std::stop_token stop) { Loop(stop); });
}

void WakeListener::Stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
}

void WakeListener::Notify() {
  uint64_t one = 1;
  if (notify_fd_ >= 0) (void)!write(notify_fd_, &one, sizeof one);
}

void WakeListener::Result(bool found_work) {
  bool due_now = false;
  {
    std::lock_guard lock(mu_);
    limiter_.Result(found_work);
    auto due = limiter_.due();
    due_now = due && *due <= clock_.Now();
  }
  if (due_now) Notify();  // a wake-up held during that poll may act now
}

void WakeListener::Loop(std::stop_token stop) {
  // notify_fd_ is written on stop, so Stop() does not wait out a poll timeout, and when
  // a result lets a held wake-up act.
  const int notify_fd = notify_fd_;
  std::stop_callback on_stop(stop, [this] { Notify(); });
  char buf[64];
  while (!stop.stop_requested()) {
    int timeout_ms = 1000;
    {
      std::lock_guard lock(mu_);
      if (auto due = limiter_.due()) {
        auto left = std::chrono::ceil<Millis>(*due - clock_.Now()).count();
        timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
      }
    }
    pollfd fds[2] = {{fd_, POLLIN, 0}, {notify_fd, POLLIN, 0}};
    const int n = poll(fds, notify_fd >= 0 ? 2 : 1, notify_fd >= 0 ? timeout_ms : std::min(timeout_ms, 100));
    if (stop.stop_requested()) break;
    if (n > 0 && notify_fd >= 0 && (fds[1].revents & POLLIN)) {
      uint64_t count = 0;
      (void)!read(notify_fd, &count, sizeof count);
    }
    bool act = false;
    if (n > 0 && (fds[0].revents & POLLIN)) {
      for (int i = 0; i < kDrainPerRound; ++i) {
        const ssize_t got = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
        if (got < 0) break;  // EAGAIN: drained
        if (std::string_view(buf, static_cast<size_t>(got)) != kMagic) {
          stats_.ignored++;
          continue;
        }
        stats_.received++;
        std::lock_guard lock(mu_);
        if (limiter_.Offer(clock_.Now())) {
          act = true;
        } else {
          stats_.coalesced++;
        }
      }
    }
    {
      std::lock_guard lock(mu_);
      if (limiter_.TakeDue(clock_.Now())) act = true;
    }
    if (act) {
      stats_.acted++;
      on_wake_();
    }
  }
}

// --- WakeSender ---------------------------------------------------------------

struct WakeSender::Target {
  bool ok = false;
  sockaddr_storage addr{};
  socklen_t len = 0;
};

WakeSender::~WakeSender() {
  if (fd4_ >= 0) close(fd4_);
  if (fd6_ >= 0) close(fd6_);
}

bool WakeSender::Send(const std::string& host_port) {
  std::shared_ptr<const Target> target;
  int fd = -1;
  {
    std::lock_guard lock(mu_);
    auto it = targets_.find(host_port);
    if (it == targets_.end()) {
      auto t = std::make_shared<Target>();
      if (std::optional<Endpoint> e = ParseEndpoint(host_port)) {
        std::string err;
        if (AddrInfoPtr res = Resolve(*e, /*passive=*/false, err)) {
          std::memcpy(&t->addr, res->ai_addr, res->ai_addrlen);
          t->len = res->ai_addrlen;
          t->ok = true;
        } else {
          spdlog::debug("WAKEUP_UNRESOLVED address={} err=\"{}\"", host_port, err);
        }
      }
      if (targets_.size() >= kMaxTargets) targets_.clear();
      it = targets_.emplace(host_port, std::move(t)).first;
    }
    target = it->second;
    if (!target->ok) return false;
    int& slot = target->addr.ss_family == AF_INET6 ? fd6_ : fd4_;
    if (slot < 0) slot = socket(target->addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    fd = slot;
  }
  if (fd < 0) return false;
  const ssize_t n = sendto(fd, kMagic.data(), kMagic.size(), MSG_DONTWAIT,
                           reinterpret_cast<const sockaddr*>(&target->addr), target->len);
  if (n != static_cast<ssize_t>(kMagic.size())) return false;
  sent_++;
  return true;
}

// --- WakeSignal -----------------------------------------------------------------

void WakeSignal::Notify() {
  {
    std::lock_guard lock(mu_);
    notified_ = true;
  }
  cv_.notify_all();
}

bool WakeSignal::WaitFor(Millis d, std::stop_token stop) {
  std::unique_lock lock(mu_);
  clock_.WaitFor(cv_, lock, stop, d, [&] { return notified_; });
  notified_ = false;
  return !stop.stop_requested();
}

}  // namespace dsync::wakeup
