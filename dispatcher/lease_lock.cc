#include "dispatcher/lease_lock.h"

#include "core/process.h"

#include <cstdio>
#include <random>
#include <stdexcept>

#include <unistd.h>

#include "core/process.h"

namespace dsync::dispatcher {
namespace {

// Params: lock_name. Creates the row free and long expired when it is missing; an
// existing row is left alone. (IGNORE cannot hide a truncated name: the constructor
// bounds its length.)
constexpr const char* kEnsureLeaseRow = R"(
INSERT IGNORE INTO distribute_lease_lock (lock_name, owner, token, expires_at)
VALUES (?, NULL, 0, '1970-01-01 00:00:00.000'))";

// Params: owner, owner, owner, ttl in microseconds, lock_name, owner.
// Takes a free, expired or own lease. The token and acquired_at change only when the
// owner does: they are assigned before `owner`, so they read the previous owner both
// under MySQL's left-to-right assignment and MariaDB's SIMULTANEOUS_ASSIGNMENT.
constexpr const char* kAcquireLease = R"(
UPDATE distribute_lease_lock
SET token = token + IF(owner <=> ?, 0, 1),
    acquired_at = IF(owner <=> ?, acquired_at, NOW(3)),
    owner = ?,
    expires_at = NOW(3) + INTERVAL ? MICROSECOND,
    renewed_at = NOW(3)
WHERE lock_name = ? AND (owner IS NULL OR expires_at < NOW(3) OR owner = ?))";

// Params: lock_name, owner. Read in the acquiring transaction, under its row lock.
constexpr const char* kSelectOwnToken = R"(
SELECT token FROM distribute_lease_lock WHERE lock_name = ? AND owner = ?)";

// Params: ttl in microseconds, lock_name, owner, token.
constexpr const char* kRenewLease = R"(
UPDATE distribute_lease_lock
SET expires_at = NOW(3) + INTERVAL ? MICROSECOND, renewed_at = NOW(3)
WHERE lock_name = ? AND owner = ? AND token = ?)";

// Params: lock_name, owner.
constexpr const char* kReleaseLease = R"(
UPDATE distribute_lease_lock SET owner = NULL, expires_at = NOW(3)
WHERE lock_name = ? AND owner = ?)";

// Params: lock_name, owner, token, margin in microseconds. A row when the fence
// holds. Not a locking read (lease_lock.h). Under REPEATABLE READ a plain SELECT reads
// the transaction's snapshot, which is taken at its first plain read: the writers call
// this last, with no plain read before it, or accept a snapshot as old as their first.
constexpr const char* kCheckLeaseFence = R"(
SELECT 1 FROM distribute_lease_lock
WHERE lock_name = ? AND owner = ? AND token = ? AND expires_at > NOW(3) + INTERVAL ? MICROSECOND)";

uint64_t Fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

const char* LeaseFenceSql() { return kCheckLeaseFence; }

std::string MakeLeaseOwnerId() {
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(r));
  std::string h = Hostname();
  if (h.size() > 140) h.resize(140);  // owner column is 191 characters
  return h + ":" + std::to_string(getpid()) + ":" + suffix;
}

std::string DispatcherLockName(const std::string& service) {
  std::string name = "dispatcher:" + service;
  if (name.size() <= 64) return name;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(Fnv1a(service)));
  return name.substr(0, 64 - 17) + "#" + hash;
}

bool HoldsLease(storage::Connection& c, const LeaseFence& fence) {
  return c.QueryInt(kCheckLeaseFence, fence.lock_name, fence.owner, fence.token, Micros(fence.margin))
      .has_value();
}

LeaseLock::LeaseLock(storage::ConnectionPool& pool, std::string lock_name, std::string owner)
    : pool_(pool), lock_name_(std::move(lock_name)), owner_(std::move(owner)) {
  if (lock_name_.empty() || lock_name_.size() > 64) {
    throw std::invalid_argument("lease lock name must be 1-64 characters: '" + lock_name_ + "'");
  }
  if (owner_.empty() || owner_.size() > 191) {
    throw std::invalid_argument("lease owner must be 1-191 characters");
  }
}

std::optional<int64_t> LeaseLock::TryAcquire(Millis ttl) {
  pool_.Run("ensure lease row", [&](storage::Connection& c) { c.Execute(kEnsureLeaseRow, lock_name_); });
  // One transaction so the token read back is the one this UPDATE left, under its lock.
  return pool_.Transact("acquire lease", [&](storage::Connection& c) -> std::optional<int64_t> {
    if (c.Execute(kAcquireLease, owner_, owner_, owner_, Micros(ttl), lock_name_, owner_) != 1) {
      return std::nullopt;
    }
    return c.QueryInt(kSelectOwnToken, lock_name_, owner_);
  });
}

bool LeaseLock::Renew(int64_t token, Millis ttl) {
  return pool_.Run("renew lease", [&](storage::Connection& c) {
    return c.Execute(kRenewLease, Micros(ttl), lock_name_, owner_, token) == 1;
  });
}

void LeaseLock::Release() {
  pool_.Run("release lease", [&](storage::Connection& c) { c.Execute(kReleaseLease, lock_name_, owner_); });
}

}  // namespace dsync::dispatcher
