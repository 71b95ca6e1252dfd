// Wake-ups: a UDP datagram that tells a process "look now" instead of waiting out its
// poll interval (issue 19). The dispatcher wakes the nodes it just assigned events to;
// producers and nodes with free slots wake the dispatcher.
//
//   auto listener = wakeup::WakeListener::Bind("127.0.0.1:7001", "node 127.0.0.1:7001",
//                                              wakeup::WakeLimiter(Millis(0), poll_interval), clock);
//   if (listener) listener->Start([&] { poller.PollNow(); });   // nullptr: disabled, logged
//   ... after each poll: listener->Result(found_work);
//   wakeup::WakeSender sender;
//   sender.Send("127.0.0.1:7001");
//
// A datagram carries nothing but kMagic: it is a hint, never trusted. A lost, blocked
// or forged one costs latency or one poll, never correctness, because polling stays
// the fallback. The receiver rate-limits what it acts on (WakeLimiter): a flood of
// forged wake-ups causes at most one early poll per `gap_after_nothing` while those
// polls find nothing. Listeners bind only the address they are given (a node's own
// address, loopback by default for the dispatcher); a bind failure logs one line
// (WAKEUP_DISABLED) and the process polls as before.
//
// Thread safety: WakeLimiter is not thread-safe (WakeListener guards its own);
// WakeListener, WakeSender and WakeSignal are.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/clock.h"

namespace dsync::wakeup {

// The whole payload of a wake-up datagram. Anything else received is ignored.
inline constexpr std::string_view kMagic = "dsync-wake/1";

struct Endpoint {
  std::string host;  // name or address; IPv6 without brackets
  uint16_t port = 0;
};
// "HOST:PORT" or "[V6]:PORT"; port 1-65535 (0 too when allow_port_zero: "any free
// port" for a listener). nullopt when malformed.
std::optional<Endpoint> ParseEndpoint(std::string_view text, bool allow_port_zero = false);

// Decides when a wake-up may act. It acts at once, unless an earlier one acted within
// `gap_after_nothing` and the poll (or dispatch cycle) after it found nothing: then at
// most one acts per `gap_after_nothing` (the poll interval), while genuine ones, whose
// polls find work, are never held back. Acts are at least `min_gap` apart. A wake-up
// that may not act yet is remembered, and all such coalesce into one, due at due().
//
// Wake-ups that arrive while a woken poll runs act at once when the poll reported
// before it found work: work is flowing, and the poller folds them into one more poll
// after it. After a poll that found nothing they wait for the running poll's result
// (at most one gap): work lets them act at once, nothing holds them one gap. So a
// flood of forged wake-ups, whose polls never find work, costs at most one poll per
// `gap_after_nothing`. (Holding them after work too cost a quarter of the throughput
// at capacity 16; this rule measured no cost: bench/RESULTS.md.)
class WakeLimiter {
 public:
  using TimePoint = Clock::TimePoint;
  WakeLimiter(Millis min_gap, Millis gap_after_nothing);

  // A wake-up arrived at `now`. True: act now. False: coalesced into the pending one.
  bool Offer(TimePoint now);
  // When the pending wake-up may act; nullopt when none is pending.
  std::optional<TimePoint> due() const;
  // True (once) when the pending wake-up may act at `now`.
  bool TakeDue(TimePoint now);
  // What the first poll (or cycle) after the latest act found; later calls, until the
  // next act, are ignored.
  void Result(bool found_work);

 private:
  TimePoint NextAllowed() const;
  void Act(TimePoint now);

  const Millis min_gap_;
  const Millis gap_after_nothing_;
  std::optional<TimePoint> acted_at_;   // the latest act
  std::optional<TimePoint> wasted_at_;  // the latest act whose poll found nothing
  bool awaiting_result_ = false;
  bool last_found_work_ = false;  // what the latest reported poll found
  bool pending_ = false;
};

struct WakeStats {
  std::atomic<uint64_t> received{0};   // datagrams carrying kMagic
  std::atomic<uint64_t> ignored{0};    // anything else
  std::atomic<uint64_t> acted{0};      // callbacks run (at once or deferred)
  std::atomic<uint64_t> coalesced{0};  // wake-ups folded into a pending one
};

class WakeListener {
 public:
  // A UDP socket bound to `listen` ("HOST:PORT"; port 0 picks a free one). nullptr,
  // after one WAKEUP_DISABLED log line naming `who`, when the address is malformed,
  // does not resolve, is not local, or the port is taken. `clock` must outlive it.
  static std::unique_ptr<WakeListener> Bind(const std::string& listen, const std::string& who,
                                            WakeLimiter limiter, Clock& clock);
  ~WakeListener();

  // Starts the receiving thread; `on_wake` runs on it, at most as WakeLimiter allows.
  void Start(std::function<void()> on_wake);
  // Stops the thread and closes the socket. Idempotent.
  void Stop();
  // WakeLimiter::Result, from any thread.
  void Result(bool found_work);
  // The bound address, with the real port ("127.0.0.1:41234").
  const std::string& address() const { return address_; }
  const WakeStats& stats() const { return stats_; }

 private:
  WakeListener(int fd, std::string address, std::string who, WakeLimiter limiter, Clock& clock);
  void Loop(std::stop_token stop);
  void Notify();  // wakes Loop

  int fd_;
  int notify_fd_;  // eventfd: Stop() and Result() wake Loop through it
  const std::string address_;
  const std::string who_;
  Clock& clock_;
  std::mutex mu_;
  WakeLimiter limiter_;  // guarded by mu_
  std::function<void()> on_wake_;
  WakeStats stats_;
  std::jthread thread_;
};

// Sends wake-ups. Addresses are resolved once and remembered (also when they do not
// resolve: a node known by `hostname:pid` costs one lookup, not one per send).
class WakeSender {
 public:
  WakeSender() = default;
  ~WakeSender();
  WakeSender(const WakeSender&) = delete;
  WakeSender& operator=(const WakeSender&) = delete;

  // One datagram to `host_port`; never blocks, never throws. False when the address
  // does not resolve or the send failed (nothing to do: polling covers it).
  bool Send(const std::string& host_port);
  uint64_t sent() const { return sent_.load(); }

 private:
  struct Target;
  std::mutex mu_;
  int fd4_ = -1;
  int fd6_ = -1;
  std::unordered_map<std::string, std::shared_ptr<const Target>> targets_;
  std::atomic<uint64_t> sent_{0};
};

// A pause that a wake-up can cut short, on `clock` (Clock::WaitFor). `clock` must
// outlive the signal.
class WakeSignal {
 public:
  explicit WakeSignal(Clock& clock) : clock_(clock) {}
  void Notify();
  // Waits `d`, or until Notify() (then clears it), or `stop`. False when stopped.
  bool WaitFor(Millis d, std::stop_token stop);

 private:
  Clock& clock_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  bool notified_ = false;
};

}  // namespace dsync::wakeup
