#include "storage/connection_pool.h"

namespace dsync::storage {

ConnectionPool::ConnectionPool(DbUrl url, Options options, Clock& clock)
    : url_(std::move(url)), options_(options), clock_(clock) {}

ConnectionPool::ConnectionPool(DbUrl url, Options options)
    : url_(std::move(url)), options_(options), clock_(own_clock_) {}

ConnectionPool::~ConnectionPool() {
  std::lock_guard lock(mu_);
  idle_.clear();
}

ConnectionPool::Lease ConnectionPool::Borrow() {
  const int max_size = options_.max_size > 0 ? options_.max_size : url_.pool_size;
  std::unique_lock lock(mu_);
  bool waited = false;
  for (;;) {
    while (!idle_.empty()) {
      Idle entry = std::move(idle_.back());
      idle_.pop_back();
      ++in_use_;
      bool stale = clock_.Now() - entry.since > options_.validate_idle_after;
      if (!stale) return Lease(this, std::move(entry.conn));
      lock.unlock();
      if (entry.conn->Ping()) return Lease(this, std::move(entry.conn));
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
      lock.unlock();
      try {
        auto conn = std::make_unique<Connection>(url_);
        std::lock_guard relock(mu_);
        ++connects_;
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

void ConnectionPool::Return(std::unique_ptr<Connection> conn) {
  bool broken = conn->broken();
  if (broken) {
    spdlog::info("DB_CONNECTION_DROPPED reason=broken server_id={}", conn->server_id());
    conn.reset();  // close outside the lock is not worth it: close on a dead socket is quick
  }
  std::lock_guard lock(mu_);
  --in_use_;
  if (broken) {
    --open_;
    ++discarded_;
  } else {
    idle_.push_back({std::move(conn), clock_.Now()});
  }
  cv_.notify_one();
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
  s.max_size = options_.max_size > 0 ? options_.max_size : url_.pool_size;
  s.open = open_;
  s.in_use = in_use_;
  s.connects = connects_;
  s.discarded = discarded_;
  s.borrow_waits = borrow_waits_;
  s.retries = retries_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace dsync::storage
