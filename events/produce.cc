#include "events/produce.h"

#include <algorithm>

#include "core/error.h"
#include "core/visible_text.h"

namespace dsync::events {
namespace {

constexpr size_t kInsertChunk = 500;

// Params: tenant_id, code, data_id, topic, payload, priority, max_retry, delay (µs)
// twice, trace_id, batch_code, service, route.
#define DSYNC_INSERT_EVENT_HEAD                                                                   \
  "INSERT INTO distribute_event\n"                                                                \
  "  (tenant_id, code, data_id, topic, payload, priority, max_retry, next_run_time, trace_id, "   \
  "batch_code, service, route)\nVALUES "
#define DSYNC_INSERT_EVENT_ROW \
  "(?, ?, ?, ?, ?, ?, ?, IF(? > 0, NOW(3) + INTERVAL ? MICROSECOND, '1970-01-01 00:00:00.000'), ?, ?, ?, ?)"
constexpr const char* kInsertEvent = DSYNC_INSERT_EVENT_HEAD DSYNC_INSERT_EVENT_ROW;

void AppendValues(std::vector<storage::Value>& out, const NewEventRow& e) {
  auto optional = [](const std::string& s) { return s.empty() ? storage::Value{} : storage::Value{s}; };
  out.insert(out.end(), {e.tenant_id, e.code, e.data_id, e.topic, e.payload, e.priority, e.max_retry,
                         e.delay_us, e.delay_us, optional(e.trace_id), optional(e.batch_code), e.service,
                         optional(e.route)});
}

// The default as information_schema shows it: MariaDB quotes a string default
// ('kbs-sync'), MySQL 8 does not.
constexpr const char* kServiceDefault = R"(
SELECT COLUMN_DEFAULT FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'distribute_event' AND COLUMN_NAME = 'service')";

}  // namespace

std::string CodeProblem(std::string_view code) {
  if (FirstInvalidUtf8(code)) return "is not valid UTF-8";
  if (auto cp = FirstHiddenCharacter(code)) {
    const bool control = *cp < 0x20 || *cp == 0x7f || (*cp >= 0x80 && *cp < 0xa0);
    return "contains " + CodePointName(*cp) +
           (control ? " (a control character)" : " (an invisible or bidi control character)");
  }
  return "";
}

bool IsReservedCode(std::string_view code) { return code.starts_with(kReservedCodePrefix); }

std::string DefaultService(storage::Connection& c) {
  std::string d = c.QueryString(kServiceDefault).value_or("");
  if (d.size() >= 2 && d.front() == '\'' && d.back() == '\'') d = d.substr(1, d.size() - 2);
  return d;
}

bool InsertEvent(storage::Connection& c, const NewEventRow& e) {
  std::vector<storage::Value> values;
  AppendValues(values, e);
  try {
    c.Execute(kInsertEvent, storage::Values(values));
    return true;
  } catch (const storage::StatementError& err) {
    if (err.kind() != DbError::Kind::kDuplicateKey) throw;
    return false;
  }
}

int InsertEvents(storage::Connection& c, const std::vector<NewEventRow>& events) {
  int existing = 0;
  for (size_t start = 0; start < events.size(); start += kInsertChunk) {
    const size_t n = std::min(kInsertChunk, events.size() - start);
    std::vector<storage::Value> codes;
    for (size_t i = 0; i < n; ++i) codes.emplace_back(events[start + i].code);
    auto rs = c.Query("SELECT COUNT(*) FROM distribute_event WHERE code IN (" + storage::Marks(n) + ")",
                      storage::Values(codes));
    existing += rs->next() ? rs->getInt(1) : 0;

    std::string sql = DSYNC_INSERT_EVENT_HEAD;
    std::vector<storage::Value> values;
    for (size_t i = 0; i < n; ++i) {
      sql += i ? ", " : "";
      sql += DSYNC_INSERT_EVENT_ROW;
      AppendValues(values, events[start + i]);
    }
    sql += " ON DUPLICATE KEY UPDATE id = id";
    c.Execute(sql, storage::Values(values));
    auto stored = c.Query("SELECT COUNT(*) FROM distribute_event WHERE code IN (" + storage::Marks(n) + ")",
                          storage::Values(codes));
    const int64_t rows = stored->next() ? stored->getInt64(1) : 0;
    if (rows != static_cast<int64_t>(n)) {
      throw DbError(DbError::Kind::kOther, 0,
                    std::to_string(n) + " distinct codes are stored as " + std::to_string(rows) +
                        " events: distribute_event.code does not compare byte for byte (run dsync migrate)");
    }
  }
  return existing;
}

}  // namespace dsync::events
