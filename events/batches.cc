#include "events/batches.h"

#include <cstdio>

#include "events/columns.h"

namespace dsync::events {
namespace {

// Params: batch_code, tenant_id, topic, payload, expected_events, service.
constexpr const char* kInsertBatch = R"(
INSERT INTO distribute_batch (batch_code, tenant_id, on_complete_topic, on_complete_payload, expected_events,
                              service)
VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE batch_code = batch_code)";

// Params: service, after, limit.
constexpr const char* kSelectOpen = R"(
SELECT batch_code, tenant_id, on_complete_topic, IFNULL(on_complete_payload, ''), expected_events, service
FROM distribute_batch WHERE status = 'OPEN' AND service = ? AND batch_code > ? ORDER BY batch_code LIMIT ?)";

// Params: batch_code.
constexpr const char* kLockBatch = "SELECT status FROM distribute_batch WHERE batch_code = ? FOR UPDATE";

// Params: completion_code, counts, batch_code.
constexpr const char* kMarkCompleted = R"(
UPDATE distribute_batch SET status = 'COMPLETED', completion_code = ?, counts = ?, completed_time = NOW(3)
WHERE batch_code = ? AND status = 'OPEN')";

// Two statements, so that the DELETE locks only the rows it removes: a DELETE with
// this WHERE may scan the table and wait on an open batch's row that a leader holds
// while completing it. Params: service, older_than (µs), limit; then one batch_code.
constexpr const char* kSelectCompletedBefore = R"(
SELECT batch_code FROM distribute_batch
WHERE status = 'COMPLETED' AND service = ? AND completed_time < NOW(3) - INTERVAL ? MICROSECOND ORDER BY batch_code LIMIT ?)";
constexpr const char* kDeleteCompleted = R"(
DELETE FROM distribute_batch WHERE batch_code = ? AND status = 'COMPLETED')";

constexpr size_t kMaxCode = 64;
constexpr const char* kPrefix = "done:";

}  // namespace

std::string CompletionCode(const std::string& batch_code) {
  std::string code = kPrefix + batch_code;
  if (code.size() <= kMaxCode) return code;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char ch : batch_code) h = (h ^ ch) * 1099511628211ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return kPrefix + batch_code.substr(0, kMaxCode - 5 - 17) + "~" + hex;
}

void InsertBatchCompletion(storage::Connection& c, const BatchCompletionRow& row) {
  std::optional<std::string> payload;
  if (!row.payload.empty()) payload = row.payload;
  c.Execute(kInsertBatch, row.batch_code, row.tenant_id, row.topic, payload, row.expected_events, row.service);
}

std::vector<BatchCompletionRow> ReadOpenBatches(storage::Connection& c, const std::string& service,
                                                const std::string& after, int limit) {
  std::vector<BatchCompletionRow> out;
  auto rs = c.Query(kSelectOpen, service, after, limit);
  while (rs->next()) {
    Columns col(*rs);
    out.push_back({.batch_code = col.String(), .tenant_id = col.String(), .topic = col.String(),
                   .payload = col.String(), .expected_events = col.OptionalInt64(), .service = col.String()});
  }
  return out;
}

bool LockOpenBatch(storage::Connection& c, const std::string& batch_code) {
  auto status = c.QueryString(kLockBatch, batch_code);
  return status && *status == "OPEN";
}

bool CompleteBatch(storage::Connection& c, const std::string& batch_code, const NewEventRow& event,
                   const std::string& counts_json) {
  InsertEvent(c, event);  // false: produced before (a leader that died after its insert
                          // could not have committed it without the update below)
  return c.Execute(kMarkCompleted, event.code, counts_json, batch_code) == 1;
}

int64_t PurgeCompletedBatches(storage::Connection& c, const std::string& service, Millis older_than, int limit) {
  std::vector<std::string> codes;
  auto rs = c.Query(kSelectCompletedBefore, service, static_cast<int64_t>(older_than.count()) * 1000, limit);
  while (rs->next()) codes.push_back(rs->getString(1));
  int64_t removed = 0;
  for (const std::string& code : codes) removed += static_cast<int64_t>(c.Execute(kDeleteCompleted, code));
  return removed;
}

}  // namespace dsync::events
