// How producers and nodes find the leading dispatcher to wake it (issue 19): the
// leader publishes its wake-up address in its lease row, after its owner id:
//
//   distribute_lease_lock.owner = "host:pid:random wake=127.0.0.1:41234"
//
// so whoever can read the database can find it, with nothing to configure, and it
// follows leadership. A dispatcher started with dispatcher.wakeups = false, or whose
// listener could not bind, publishes no address and is simply not woken.
//
//   dispatcher::DispatcherWaker waker(pool, settings.service, clock);
//   waker.Wake();   // after producing; never throws, never blocks on the network
//
// Thread safety: DispatcherWaker is thread-safe.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/wakeup.h"
#include "storage/connection_pool.h"

namespace dsync::dispatcher {

// `owner` with " wake=<address>" appended; `owner` unchanged when that would not fit
// the owner column (191 characters) or `address` is empty.
std::string WithWakeAddress(std::string owner, const std::string& address);
// The address WithWakeAddress put in `owner`, if any.
std::optional<std::string> WakeAddressOf(std::string_view owner);

class DispatcherWaker {
 public:
  // `pool` and `clock` must outlive it. The leader's address is read at most once per
  // `refresh` (a new leader's address is learnt within that; meanwhile wake-ups go to
  // the old one and cost only latency).
  DispatcherWaker(storage::ConnectionPool& pool, std::string service, Clock& clock,
                  Millis refresh = Millis(5000));

  // Sends one wake-up to the leading dispatcher, reading its address first when it is
  // older than `refresh`. Returns whether a datagram went out; database errors are
  // logged at debug level and retried after `refresh`.
  bool Wake();
  uint64_t sent() const { return sender_.sent(); }

 private:
  storage::ConnectionPool& pool_;
  const std::string lock_name_;
  Clock& clock_;
  const Millis refresh_;
  std::mutex mu_;
  std::optional<Clock::TimePoint> read_at_;  // guarded by mu_
  std::string address_;                      // guarded by mu_; empty: none published
  wakeup::WakeSender sender_;
};

}  // namespace dsync::dispatcher
