#include "storage/connection_pool.h"

#include <map>
#include <thread>
#include <utility>

#include <unistd.h>

namespace dsync::storage {

ConnectionPool::ConnectionPool(DbUrl url, Options options, Clock& clock)
    : url_(std::move(url)), options_(options), clock_(clock) {
  ChooseFirstHost();
}

ConnectionPool::ConnectionPool(DbUrl url, Options options)
    : url_(std::move(url)), options_(options), clock_(own_clock_) {
  ChooseFirstHost();
}

// order=random spreads processes over the hosts, but all pools of one process start
// on the same host (chosen from the pid), so one process still writes through one
// member and its pools do not conflict with each other in certification.
void ConnectionPool::ChooseFirstHost() {
  if (url_.order == HostOrder::kRandom && !url_.hosts.empty()) {
    preferred_host_ = static_cast<size_t>(getpid()) % url_.hosts.size();
  }
}

ConnectionPool::~ConnectionPool() {
  std::lock_guard lock(mu_);
  idle_.clear();
}

ConnectionPool::Lease ConnectionPool::Borrow() {
  const int max_size = MaxSize();
  std::unique_lock lock(mu_);
  bool waited = false;
  for (;;) {
    while (!idle_.empty()) {
      Idle entry = std::move(idle_.back());
      idle_.pop_back();
      ++in_use_;
      bool stale = clock_.Now() - entry.since > options_.validate_idle_after;
      if (!stale) {
        lent_[entry.conn.get()] = {entry.conn->host_index(), entry.conn->server_id()};
        return Lease(this, std::move(entry.conn));
      }
      lock.unlock();
      if (entry.conn->Ping()) {
        std::lock_guard relock(mu_);
        lent_[entry.conn.get()] = {entry.conn->host_index(), entry.conn->server_id()};
        return Lease(this, std::move(entry.conn));
      }
      spdlog::info("DB_CONNECTION_DROPPED reason=failed_validation server_id={}", entry.conn->server_id());
      entry.conn.reset();
      lock.lock();
      --in_use_;
      --open_;
      ++discarded_;
    }
    if (open_ < max_size) {
      ++open_;
      ++in_use_;
      const size_t first = preferred_host_;
      lock.unlock();
      try {
        auto conn = std::make_unique<Connection>(url_, first);
        std::lock_guard relock(mu_);
        ++connects_;
        if (conn->host_index() != preferred_host_) {
          // The member we wrote through is gone or not ready: move every new
          // connection to the one that answered (idle ones left go as they return).
          spdlog::warn("DB_FAILOVER from={} to={} url={}", url_.hosts[preferred_host_].Label(),
                       url_.hosts[conn->host_index()].Label(), url_.Masked());
          preferred_host_ = conn->host_index();
          ++failovers_;
        }
        lent_[conn.get()] = {conn->host_index(), conn->server_id()};
        return Lease(this, std::move(conn));
      } catch (...) {
        std::lock_guard relock(mu_);
        --open_;
        --in_use_;
        cv_.notify_one();
        throw;
      }
    }
    if (!waited) {
      waited = true;
      ++borrow_waits_;
    }
    if (!cv_.wait_for(lock, options_.borrow_timeout, [&] { return !idle_.empty() || open_ < max_size; })) {
      throw DbError(DbError::Kind::kPoolExhausted, 0,
                    "no database connection free after " +
                        std::to_string(options_.borrow_timeout.count()) + " ms (pool size " +
                        std::to_string(max_size) + ")");
    }
  }
}

void ConnectionPool::Prewarm(int n) {
  const int max_size = MaxSize();
  int to_open = 0;
  size_t first = 0;
  {
    std::lock_guard lock(mu_);
    to_open = std::min(n, max_size) - open_;
    if (to_open <= 0) return;
    open_ += to_open;
    in_use_ += to_open;  // lent to the threads below until Return
    first = preferred_host_;
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(to_open));
  for (int i = 0; i < to_open; ++i) {
    threads.emplace_back([this, first] {
      std::unique_ptr<Connection> conn;
      try {
        conn = std::make_unique<Connection>(url_, first);
      } catch (const std::exception& e) {
        spdlog::debug("DB_PREWARM_FAILED url={} error={}", url_.Masked(), e.what());
      }
      if (!conn) {
        std::lock_guard lock(mu_);
        --open_;
        --in_use_;
        cv_.notify_one();
        return;
      }
      {
        std::lock_guard lock(mu_);
        ++connects_;
      }
      Return(std::move(conn));  // idle, or closed if it reached another member
    });
  }
  for (std::thread& t : threads) t.join();
}

bool ConnectionPool::MayKeep(const Connection& c) {
  std::lock_guard lock(mu_);
  return c.host_index() == preferred_host_ && (!idle_.empty() || open_ < MaxSize());
}

void ConnectionPool::Return(std::unique_ptr<Connection> conn) {
  std::lock_guard lock(mu_);
  lent_.erase(conn.get());
  // One process writes through one member: after a failover, connections still open
  // to the previous member are closed as they come back rather than reused.
  // A retired one is closed quietly: its user changed the session on purpose.
  const bool retired = conn->retired() && !conn->broken();
  const bool drop = conn->broken() || retired || conn->host_index() != preferred_host_;
  if (drop) {
    if (!retired) {
      spdlog::info("DB_CONNECTION_DROPPED reason={} server_id={}", conn->broken() ? "broken" : "other_member",
                   conn->server_id());
    }
    conn.reset();  // closing under the lock is quick: the socket is dead or idle
  }
  --in_use_;
  if (drop) {
    --open_;
    if (!retired) ++discarded_;
  } else {
    idle_.push_back({std::move(conn), clock_.Now()});
  }
  cv_.notify_one();
}

int ConnectionPool::KillLentStatements() {
  std::vector<std::pair<size_t, uint64_t>> sessions;  // (host index, server id)
  {
    std::lock_guard lock(mu_);
    for (const auto& [conn, session] : lent_) sessions.push_back(session);
  }
  int killed = 0;
  std::map<size_t, std::unique_ptr<Connection>> killers;  // one per host: KILL is per server
  for (const auto& [host, id] : sessions) {
    if (id == 0) continue;
    try {
      std::unique_ptr<Connection>& killer = killers[host];
      if (!killer) killer = std::make_unique<Connection>(url_, host);
      if (killer->host_index() != host) continue;  // that member is gone: so is the session
      killer->Execute("KILL QUERY ?", id);
      ++killed;
    } catch (const DbError& e) {
      // 1094 unknown thread: the session ended meanwhile.
      if (e.code() != 1094) spdlog::warn("DB_KILL_QUERY_FAILED server_id={} url={} err={}", id, url_.Masked(), e.what());
    }
  }
  return killed;
}

void ConnectionPool::BackOff(int attempt) {
  int64_t cap = options_.retry.max_delay.count();
  int64_t d = std::min<int64_t>(cap, options_.retry.base_delay.count() << std::min(attempt - 1, 20));
  int64_t jittered;
  {
    std::lock_guard lock(mu_);
    jittered = std::uniform_int_distribution<int64_t>(d / 2, std::max<int64_t>(d, 1))(rng_);
  }
  clock_.SleepFor(Millis(jittered), {});
}

PoolStats ConnectionPool::stats() {
  std::lock_guard lock(mu_);
  PoolStats s;
  s.max_size = MaxSize();
  s.open = open_;
  s.in_use = in_use_;
  s.connects = connects_;
  s.discarded = discarded_;
  s.borrow_waits = borrow_waits_;
  s.retries = retries_.load(std::memory_order_relaxed);
  s.failovers = failovers_;
  s.host = url_.hosts[preferred_host_].Label();
  return s;
}

}  // namespace dsync::storage
