// The generic lease loop: acquire, renew, watchdog, release, over any LeaseStrategy
// (dispatcher/lease_lock.h). It knows no SQL, and time comes from the injected Clock,
// so tests step it with Tick() and a FakeClock instead of running its thread.
//
//   dispatcher::Locker locker(lease, clock, {.ttl = 10s}, "dispatcher:kbs-sync");
//   locker.Start();                 // background: Tick(), sleep what it returns, repeat
//   if (locker.is_leader()) ...     // checked before every unit of leader work
//   locker.Stop();                  // releases the lease if held
//
// Timing, for ttl T (defaults in LockerOptions):
//   - a follower tries to acquire every acquire_interval (T/10);
//   - the leader renews every renew_interval (T/3) after the previous renew was sent,
//     and retries a failed renew every acquire_interval;
//   - watchdog: a lease acquired or renewed by a statement SENT at local time s is
//     trusted until s + T - watchdog_margin (T/5) on the local steady clock. The
//     database set its expiry to (its NOW at arrival) + T, which is later, so the
//     leader stops before anyone else can take the lease. is_leader() turns false at
//     that deadline by itself, even while the loop is blocked in a hanging renew.
//   - a renew or acquire that returns after that deadline (a frozen process, a
//     stalled network) does not count: leadership is dropped, then re-taken by a
//     fresh acquire. Re-taking a lease nobody else held in between keeps its token.
//
// Logs: LEASE_ACQUIRED (info), LEASE_LOST (warn, with reason), LEASE_RELEASED (info),
// LEASE_RENEW_FAILED / LEASE_ACQUIRE_FAILED (warn, the error).
//
// Thread safety: is_leader(), token(), stats() from any thread. Tick() from one thread
// at a time (the loop's, or a test's); Start/Stop from one controlling thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/clock.h"
#include "dispatcher/lease_lock.h"

namespace dsync::dispatcher {

struct LockerOptions {
  Millis ttl{10000};            // lease lifetime on the database clock
  Millis renew_interval{0};     // 0: ttl / 3
  Millis acquire_interval{0};   // 0: ttl / 10; also the retry pause after a failed renew
  Millis watchdog_margin{0};    // 0: ttl / 5
};

struct LockerStats {
  bool leader = false;
  int64_t token = 0;              // of the current or last tenure
  uint64_t acquired = 0;          // leadership gained
  uint64_t lost = 0;              // leadership lost (refused renew, watchdog, late answer)
  uint64_t lost_by_watchdog = 0;  // of `lost`: the renew deadline passed, or a late answer
  uint64_t renewals = 0;          // successful renews
  uint64_t renew_failures = 0;    // renews that threw
  uint64_t acquire_failures = 0;  // acquire attempts that threw
};

class Locker {
 public:
  // `strategy` and `clock` must outlive the Locker. `name` tags log lines.
  Locker(LeaseStrategy& strategy, Clock& clock, LockerOptions options, std::string name);
  ~Locker();  // Stop()s

  // One step: applies the watchdog, then acquires (follower) or renews (leader)
  // when due. Returns how long to wait before the next Tick. Never throws: strategy
  // failures are counted and logged.
  Millis Tick();

  // Runs Tick() in a loop on a background thread until Stop(). Idempotent.
  void Start();
  // Stops the loop, then releases the lease if held (best effort). Idempotent.
  void Stop();
  // Drops leadership at once, then releases the lease row if this Locker took it
  // since the last Release() (best effort; the UPDATE only matches while the row
  // still names this owner).
  void Release();

  // True while a lease is held and its local watchdog deadline has not passed.
  bool is_leader();
  // The fencing token while is_leader().
  std::optional<int64_t> token();
  LockerStats stats();
  const LockerOptions& options() const { return options_; }
  const std::string& owner() const { return strategy_.owner(); }

 private:
  void LoseLocked(const char* reason, bool watchdog);
  void Loop(std::stop_token stop);

  LeaseStrategy& strategy_;
  Clock& clock_;
  const LockerOptions options_;
  const std::string name_;

  std::mutex mu_;
  bool leader_ = false;
  bool may_hold_row_ = false;        // acquired since the last Release()
  int64_t token_ = 0;
  Clock::TimePoint valid_until_{};   // watchdog deadline while leader_
  Clock::TimePoint next_attempt_{};  // when Tick() next talks to the strategy
  LockerStats stats_;
  std::jthread thread_;
};

}  // namespace dsync::dispatcher
