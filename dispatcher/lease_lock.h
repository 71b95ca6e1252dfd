// The dispatcher's lease: one row of distribute_lease_lock per lock name, holding the
// owner, a fencing token and an expiry on the DATABASE clock. Who leads is decided
// only by conditional statements on that row; process clocks never compare.
//
//   dispatcher::LeaseLock lease(pool, DispatcherLockName("kbs-sync"), MakeLeaseOwnerId());
//   if (auto token = lease.TryAcquire(10s)) { ... lease.Renew(*token, 10s) ... }
//
// The strategy interface (LeaseStrategy) is the SQL-free contract the generic loop in
// dispatcher/locker.h drives, as userver's dist_lock separates its locker from its
// strategy; tests drive the locker with an in-memory strategy.
//
// Fencing token: bumped whenever the lease passes to a different owner (or from free
// to held), never when the holder re-takes its own lease that nobody else held in
// between, so a token value names one uninterrupted tenure of one owner. Writes made
// under the lease end their transaction with HoldsLease() just before COMMIT: a holder
// whose lease expired, is about to (within the fence's margin), or was taken over
// rolls back. The read takes no lock, so a takeover never waits for a holder (a
// holder frozen mid-transaction by SIGSTOP or a VM pause would otherwise block it for
// as long as it stays frozen). What the lease cannot stop, a holder frozen between
// that read and its COMMIT for longer than the margin and then committing after a
// takeover, is harmless by construction: every write under it is also conditional
// on the rows' own version (an assignment matches only `id, version, status =
// 'PENDING'`), so two dispatchers never assign one event.
//
// Thread safety: LeaseLock is thread-safe (stateless besides its pool).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/clock.h"
#include "storage/connection_pool.h"

namespace dsync::dispatcher {

// A lease strategy: where the lease lives. Every method is one short round of
// conditional statements; failures (database down) throw and are handled by the
// caller, which treats them as "outcome unknown".
class LeaseStrategy {
 public:
  virtual ~LeaseStrategy() = default;

  // Takes the lease for `ttl` when it is free, expired or already this owner's.
  // Returns the fencing token now held; nullopt when another owner holds an
  // unexpired lease. Throws on failure.
  virtual std::optional<int64_t> TryAcquire(Millis ttl) = 0;
  // Extends the lease held under `token` to now + ttl. Returns false when it is no
  // longer this owner's under that token (taken over, released). Throws on failure.
  virtual bool Renew(int64_t token, Millis ttl) = 0;
  // Gives the lease up if this owner holds it; no effect otherwise. Throws on failure.
  virtual void Release() = 0;
  // host:pid:random, unique per process.
  virtual const std::string& owner() const = 0;
};

// What a write under the lease proves it still holds.
struct LeaseFence {
  std::string lock_name;
  std::string owner;
  int64_t token = 0;
  // The lease must still have this long to run (database clock) for the fence to
  // hold: more than a COMMIT takes.
  Millis margin{0};
};

// "host:pid:<16 random hex digits>": unique per process, readable in the table.
std::string MakeLeaseOwnerId();

// The lock name of the dispatcher leader of `service`: "dispatcher:<service>", or a
// hashed form when that exceeds the 64 characters of lock_name.
std::string DispatcherLockName(const std::string& service);

// Last statement before the COMMIT of a transaction that writes under the lease: true
// when `fence` still holds the lease for at least fence.margin more (database clock).
// A plain read, no lock (see above). Throws DbError (inside Transact) like
// any statement.
// REQUIRES: the last statement of the caller's transaction, just before its COMMIT.
bool HoldsLease(storage::Connection& c, const LeaseFence& fence);
// Its statement, for bench/dispatch_bench.cc's EXPLAIN. Params: lock_name, owner,
// token, margin (µs).
const char* LeaseFenceSql();

// The SQL strategy on distribute_lease_lock (table in V001).
class LeaseLock final : public LeaseStrategy {
 public:
  // REQUIRES: lock_name is 1-64 characters; owner is 1-191 characters
  // (std::invalid_argument otherwise).
  LeaseLock(storage::ConnectionPool& pool, std::string lock_name, std::string owner);

  // Ensures the row exists (created free and already expired: a missing row is
  // never read as "no lock"), then one conditional UPDATE takes it. Throws DbError.
  std::optional<int64_t> TryAcquire(Millis ttl) override;
  // One UPDATE fenced by owner and token. Throws DbError.
  bool Renew(int64_t token, Millis ttl) override;
  // One UPDATE WHERE owner = this owner. Throws DbError.
  void Release() override;
  const std::string& owner() const override { return owner_; }
  const std::string& lock_name() const { return lock_name_; }
  LeaseFence Fence(int64_t token, Millis margin = Millis(0)) const {
    return {lock_name_, owner_, token, margin};
  }

 private:
  storage::ConnectionPool& pool_;
  const std::string lock_name_;
  const std::string owner_;
};

}  // namespace dsync::dispatcher
