// A table dsync keeps in each target datasource (table/undo_table.h dsync_step_undo,
// table/chunk_table.h dsync_sync_chunk): Prepare creates it on a handler's first use of
// a target (remembered by the target's masked URL until Forget, so that one dropped
// behind our back is created again) and purges records older than the step's
// undo_retention_days at every use; a failed purge is logged as `purge_failed_event`,
// it never fails the step.
//
// Thread safety: Prepare and Forget may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "storage/connection.h"
#include "storage/connection_pool.h"
#include "table/spec.h"

namespace dsync::table {

class TargetTable {
 public:
  TargetTable(const char* name, const char* create_sql, const char* purge_sql, const char* purge_failed_event)
      : name_(name), create_sql_(create_sql), purge_sql_(purge_sql), purge_failed_event_(purge_failed_event) {}

  void Prepare(storage::ConnectionPool& pool, const Spec& spec);
  void Forget();
  const char* name() const { return name_; }

 private:
  const char* const name_;
  const char* const create_sql_;
  const char* const purge_sql_;
  const char* const purge_failed_event_;
  std::mutex mu_;
  std::set<std::string> ready_;  // targets (masked URL) where the table exists
};

// The target's max_allowed_packet (0 when unknown): a record must fit in one statement.
int64_t MaxAllowedPacket(storage::Connection& c);

}  // namespace dsync::table
