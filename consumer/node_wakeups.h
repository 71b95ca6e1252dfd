// A node's side of wake-ups (issue 19; core/wakeup.h), kept out of ConsumerNode:
//   - a UDP listener on the node's address (consumer.wakeup_listen, default the node
//     address itself, which is where the dispatcher sends): a wake-up makes the
//     poller look at once, rate-limited (after a poll that found nothing, at most one
//     early poll per consumer.poll_interval, however many datagrams arrive);
//   - pacing: when the node was full, workers freed slots and a poll could not fill
//     them all, the node wakes the leading dispatcher (dispatcher/dispatcher_waker.h), which then assigns
//     at once instead of at its next cycle. An idle node frees no slots and sends
//     nothing, so an idle cluster costs the database nothing more.
// Off (consumer.wakeups = false) or unbindable: every method does nothing.
//
// Thread safety: Start/Stop from the controlling thread; SlotsFreed from any worker;
// Polled from the poller thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/wakeup.h"
#include "dispatcher/dispatcher_waker.h"
#include "storage/connection_pool.h"

namespace dsync::consumer {

struct NodeWakeupOptions {
  bool enabled = true;           // consumer.wakeups
  std::string listen;            // consumer.wakeup_listen, or the node address
  std::string node_address;      // for the log lines
  std::string service;           // whose dispatcher to wake
  Millis poll_interval{200};     // the rate limit for wake-ups that find nothing
};

struct NodeWakeupStats {
  uint64_t received = 0;   // wake-up datagrams
  uint64_t acted = 0;      // early polls they caused
  uint64_t dispatcher_wakes = 0;  // wake-ups sent to the dispatcher
};

class NodeWakeups {
 public:
  // `pool` and `clock` must outlive it. Binds the listener now (not its thread).
  NodeWakeups(storage::ConnectionPool& pool, Clock& clock, const NodeWakeupOptions& options);
  ~NodeWakeups();

  // Starts listening; `poll_now` runs on the listener's thread when a wake-up acts.
  void Start(std::function<void()> poll_now);
  void Stop();
  // A worker finished events: its slots are free.
  void SlotsFreed() { freed_.store(true, std::memory_order_relaxed); }
  // After every poll: whether it found events, and whether slots are still free.
  void Polled(bool found_work, bool slots_free);
  NodeWakeupStats stats() const;

 private:
  std::unique_ptr<wakeup::WakeListener> listener_;
  std::unique_ptr<dispatcher::DispatcherWaker> dispatcher_;
  std::atomic<bool> freed_{false};
  bool was_full_ = false;  // a poll left no slot free since the last wake-up; poller thread only
  std::atomic<uint64_t> dispatcher_wakes_{0};
};

}  // namespace dsync::consumer
