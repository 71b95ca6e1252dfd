#include "table/target_table.h"

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace dsync::table {

constexpr const char* kMaxPacketSql = "SELECT @@max_allowed_packet";

void TargetTable::Prepare(storage::ConnectionPool& pool, const Spec& spec) {
  const std::string id = pool.url().Masked();
  bool ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready = ready_.count(id) > 0;
  }
  if (!ready) {
    pool.Run(spec.What(std::string("create ") + name_), [&](storage::Connection& c) { c.Execute(create_sql_); });
    std::lock_guard<std::mutex> lock(mu_);
    ready_.insert(id);
  }
  try {
    pool.Run(spec.What(std::string("purge ") + name_),
             [&](storage::Connection& c) { return c.Execute(purge_sql_, spec.undo_retention_days); });
  } catch (const DbError& e) {
    spdlog::warn("{} step={} err={}", purge_failed_event_, spec.step, e.what());
  }
}

void TargetTable::Forget() {
  std::lock_guard<std::mutex> lock(mu_);
  ready_.clear();
}

int64_t MaxAllowedPacket(storage::Connection& c) { return c.QueryInt(kMaxPacketSql).value_or(0); }

}  // namespace dsync::table
