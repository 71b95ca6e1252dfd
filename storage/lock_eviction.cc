#include "storage/lock_eviction.h"

#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

namespace dsync::storage {
namespace {

// The session holding the lock session ? waits for.   params: the waiting session's id
constexpr const char* kBlockerMariaDb = R"(
SELECT b.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w
JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
WHERE r.trx_mysql_thread_id = ? LIMIT 1)";
constexpr const char* kBlockerMySql = R"(
SELECT bt.PROCESSLIST_ID FROM performance_schema.data_lock_waits w
JOIN performance_schema.threads bt ON bt.THREAD_ID = w.BLOCKING_THREAD_ID
JOIN performance_schema.threads rt ON rt.THREAD_ID = w.REQUESTING_THREAD_ID
WHERE rt.PROCESSLIST_ID = ? LIMIT 1)";

std::optional<uint64_t> Blocker(Connection& watcher, uint64_t waiting) {
  try {
    if (auto id = watcher.QueryInt(kBlockerMariaDb, waiting)) return static_cast<uint64_t>(*id);
    return std::nullopt;
  } catch (const DbError& e) {
    if (e.code() != 1109) throw;  // 1109 unknown table: not MariaDB
  }
  if (auto id = watcher.QueryInt(kBlockerMySql, waiting)) return static_cast<uint64_t>(*id);
  return std::nullopt;
}

}  // namespace

void WhileEvictingStaleLocks(ConnectionPool& pool, Connection& c, Clock& clock, Millis after, std::string_view what,
                             const std::function<void()>& fn, Millis poll) {
  const uint64_t me = c.server_id();
  if (me == 0) return fn();
  std::jthread watcher([&, what = std::string(what)](std::stop_token stop) {
    std::unique_ptr<Connection> w;
    std::optional<uint64_t> blocker;
    Clock::TimePoint since = clock.Now();
    while (clock.SleepFor(poll, stop)) {
      try {
        if (!w) w = std::make_unique<Connection>(pool.url(), c.host_index());
        if (w->host_index() != c.host_index()) return;  // that member is gone: so is the wait
        const std::optional<uint64_t> now = Blocker(*w, me);
        if (now != blocker) since = clock.Now();
        blocker = now;
        if (!blocker || *blocker == me || clock.Now() - since < after) continue;
        w->Execute("KILL ?", *blocker);
        spdlog::warn("DB_LOCK_HOLDER_EVICTED what={} waiting_session={} holder_session={} waited_ms={}", what, me,
                     *blocker, std::chrono::duration_cast<Millis>(clock.Now() - since).count());
        blocker.reset();
      } catch (const DbError& e) {
        if (e.code() == 1094) continue;  // unknown thread: the holder ended meanwhile
        spdlog::warn("DB_LOCK_EVICTION_UNAVAILABLE what={} session={} err={}", what, me, e.what());
        return;
      }
    }
  });
  fn();  // the jthread is stopped and joined as it goes out of scope
}

}  // namespace dsync::storage
