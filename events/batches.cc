#include "events/batches.h"

#include <algorithm>
#include <cstdio>

#include "events/columns.h"
#include "events/rows.h"

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

// Params: batch_code, service.
constexpr const char* kCountBatchEvents = R"(
SELECT status, COUNT(*) FROM distribute_event WHERE batch_code = ? AND service = ? GROUP BY status)";

// Params: service, batch_code.
constexpr const char* kLockBatch = "SELECT status FROM distribute_batch WHERE service = ? AND batch_code = ? FOR UPDATE";

// Params: completion_code, counts, service, batch_code.
constexpr const char* kMarkCompleted = R"(
UPDATE distribute_batch SET status = 'COMPLETED', completion_code = ?, counts = ?, completed_time = NOW(3)
WHERE service = ? AND batch_code = ? AND status = 'OPEN')";

// Params: completion_code, conflict, service, batch_code.
constexpr const char* kMarkConflict = R"(
UPDATE distribute_batch SET status = 'CONFLICT', completion_code = ?, conflict = ?
WHERE service = ? AND batch_code = ? AND status = 'OPEN')";

// Params: service, batch_code.
constexpr const char* kSelectState = R"(
SELECT status, IFNULL(completion_code, ''), IFNULL(conflict, '') FROM distribute_batch
WHERE service = ? AND batch_code = ?)";

// Two statements, so that the DELETE locks only the rows it removes: a DELETE with
// this WHERE may scan the table and wait on an open batch's row that a leader holds
// while completing it. Params: service, older_than (µs), limit; then service, one batch_code.
constexpr const char* kSelectCompletedBefore = R"(
SELECT batch_code FROM distribute_batch
WHERE status = 'COMPLETED' AND service = ? AND completed_time < NOW(3) - INTERVAL ? MICROSECOND ORDER BY batch_code LIMIT ?)";
constexpr const char* kDeleteCompleted = R"(
DELETE FROM distribute_batch WHERE service = ? AND batch_code = ? AND status = 'COMPLETED')";

constexpr size_t kMaxCode = 64;
constexpr size_t kHashedKeep = kMaxCode - kReservedCodePrefix.size() - 17;  // "~" + 16 hex digits

// The conflict reason: one line, at most 512 characters (the column), the found
// event's fields as stored (an operator reads them through the CLI, which escapes).
std::string ConflictReason(const std::string& code, const std::optional<EventRow>& found) {
  std::string why = "event " + code + " exists but was not produced by this batch's completer";
  if (found) {
    why += " (topic " + found->topic + ", service " + found->service + ", created " + found->create_time +
           (found->batch_code.empty() ? "" : ", batch " + found->batch_code) + ")";
  }
  why += "; the completion event was not produced";
  return why.size() > 512 ? why.substr(0, 509) + "..." : why;
}

}  // namespace

std::string CompletionCode(const std::string& service, const std::string& batch_code) {
  const std::string key = service + ":" + batch_code;
  std::string code = std::string(kReservedCodePrefix) + key;
  if (code.size() <= kMaxCode && service.find(':') == std::string::npos) return code;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over service, NUL, batch code
  for (unsigned char ch : service) h = (h ^ ch) * 1099511628211ULL;
  h = (h ^ 0) * 1099511628211ULL;
  for (unsigned char ch : batch_code) h = (h ^ ch) * 1099511628211ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  // Cut at a character boundary: never inside a UTF-8 sequence.
  size_t keep = std::min(kHashedKeep, key.size());
  while (keep > 0 && keep < key.size() && (static_cast<unsigned char>(key[keep]) & 0xc0) == 0x80) --keep;
  return std::string(kReservedCodePrefix) + key.substr(0, keep) + "~" + hex;
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

std::map<std::string, int64_t> CountBatchEvents(storage::Connection& c, const std::string& service,
                                                const std::string& batch_code) {
  std::map<std::string, int64_t> out;
  auto rs = c.Query(kCountBatchEvents, batch_code, service);
  while (rs->next()) out[rs->getString(1)] = rs->getInt64(2);
  return out;
}

bool LockOpenBatch(storage::Connection& c, const std::string& service, const std::string& batch_code) {
  auto status = c.QueryString(kLockBatch, service, batch_code);
  return status && *status == "OPEN";
}

CompletionOutcome CompleteBatch(storage::Connection& c, const std::string& batch_code, const NewEventRow& event,
                                const std::string& counts_json) {
  if (InsertEvent(c, event)) {
    const bool marked = c.Execute(kMarkCompleted, event.code, counts_json, event.service, batch_code) == 1;
    return {marked ? CompletionOutcome::kCompleted : CompletionOutcome::kNotOpen, ""};
  }
  // The code is taken. Not by a completer: its insert commits with the COMPLETED mark,
  // and the row is still OPEN under our lock.
  const std::string why = ConflictReason(event.code, ReadEvent(c, event.code));
  const bool marked = c.Execute(kMarkConflict, event.code, why, event.service, batch_code) == 1;
  return {marked ? CompletionOutcome::kConflict : CompletionOutcome::kNotOpen, why};
}

std::optional<BatchState> ReadBatchState(storage::Connection& c, const std::string& service,
                                         const std::string& batch_code) {
  auto rs = c.Query(kSelectState, service, batch_code);
  if (!rs->next()) return std::nullopt;
  return BatchState{rs->getString(1), rs->getString(2), rs->getString(3)};
}

int64_t PurgeCompletedBatches(storage::Connection& c, const std::string& service, Millis older_than, int limit) {
  std::vector<std::string> codes;
  auto rs = c.Query(kSelectCompletedBefore, service, static_cast<int64_t>(older_than.count()) * 1000, limit);
  while (rs->next()) codes.push_back(rs->getString(1));
  int64_t removed = 0;
  for (const std::string& code : codes) removed += static_cast<int64_t>(c.Execute(kDeleteCompleted, service, code));
  return removed;
}

}  // namespace dsync::events
