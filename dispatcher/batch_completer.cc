#include "dispatcher/batch_completer.h"

#include <map>
#include <optional>

#include <spdlog/spdlog.h>

#include "core/json_limits.h"
#include "core/visible_text.h"
#include "dispatcher/retention.h"
#include "events/batches.h"
#include "events/purge.h"
#include "events/rows.h"

namespace dsync::dispatcher {
namespace {

constexpr int kPage = 200;         // open batches read per query
constexpr int kMaxPayloadDepth = 64;

// The batch's event count when it is complete: it has events, every one terminal,
// and (when the batch says how many it has) all of them; nullopt otherwise.
std::optional<int64_t> CompleteTotal(const std::map<std::string, int64_t>& by_status,
                                     std::optional<int64_t> expected_events) {
  int64_t total = 0;
  for (const auto& [status, n] : by_status) {
    if (!events::IsTerminalStatus(status)) return std::nullopt;
    total += n;
  }
  if (total == 0 || total < expected_events.value_or(1)) return std::nullopt;
  return total;
}

}  // namespace

nlohmann::json CompletionPayload(const std::string& stored_payload, const std::string& batch_code,
                                 const std::map<std::string, int64_t>& by_status) {
  nlohmann::json counts = nlohmann::json::object();
  int64_t total = 0;
  for (const auto& [status, n] : by_status) {
    counts[status] = n;
    total += n;
  }
  nlohmann::json batch = {{"code", batch_code}, {"total", total}, {"by_status", std::move(counts)}};
  nlohmann::json payload = nlohmann::json::object();
  std::string error;
  if (!stored_payload.empty()) {
    if (JsonNestingDepth(stored_payload, kMaxPayloadDepth) > kMaxPayloadDepth) {
      error = "nested deeper than " + std::to_string(kMaxPayloadDepth) + " levels";
    } else {
      payload = nlohmann::json::parse(stored_payload, nullptr, false);
      if (payload.is_discarded()) error = "not valid JSON";
      else if (!payload.is_object()) error = "not a JSON object";
      if (!error.empty()) payload = nlohmann::json::object();
    }
  }
  if (!error.empty()) payload["on_complete_payload_error"] = error;
  payload["batch"] = std::move(batch);
  return payload;
}

BatchCompleter::BatchCompleter(storage::ConnectionPool& pool, BatchCompleterOptions options)
    : pool_(pool), service_(std::move(options.service)), topics_(std::move(options.topics)) {}

BatchCheckReport BatchCompleter::CheckOnce(const std::function<bool()>& keep_going) {
  BatchCheckReport report;
  std::string after;
  while (keep_going()) {
    auto open = pool_.Run("read open batches",
                          [&](storage::Connection& c) { return events::ReadOpenBatches(c, service_, after, kPage); });
    for (const events::BatchCompletionRow& b : open) {
      if (!keep_going()) break;
      ++report.open;
      // The cheap look first, outside any transaction (most open batches are not done).
      auto by_status = pool_.Run("batch progress", [&](storage::Connection& c) {
        return events::CountBatchEvents(c, b.service, b.batch_code);
      });
      if (!CompleteTotal(by_status, b.expected_events)) continue;

      events::NewEventRow e;
      e.service = b.service;
      e.code = events::CompletionCode(b.service, b.batch_code);
      e.topic = b.topic;
      e.tenant_id = b.tenant_id.empty() ? "0" : b.tenant_id;
      e.data_id = b.batch_code;
      e.trace_id = b.batch_code;
      const auto topic = topics_.find(b.topic);
      const TopicSettings defaults;
      const TopicSettings& t = topic == topics_.end() ? defaults : topic->second;
      e.max_retry = t.max_retry;
      e.priority = t.priority;
      // Counted again inside the completing transaction, with the batch's row locked: an
      // event added to the batch since the look above (still PENDING, or terminal but not
      // yet counted) either keeps the batch open or is in the payload's counts; the
      // counts written are the ones that decided the completion.
      std::optional<int64_t> total;
      const events::CompletionOutcome outcome = pool_.Transact("complete batch", [&](storage::Connection& c) {
        if (!events::LockOpenBatch(c, b.service, b.batch_code)) return events::CompletionOutcome{};
        by_status = events::CountBatchEvents(c, b.service, b.batch_code);
        total = CompleteTotal(by_status, b.expected_events);
        if (!total) return events::CompletionOutcome{};
        e.payload = CompletionPayload(b.payload, b.batch_code, by_status).dump();
        return events::CompleteBatch(c, b.batch_code, e, nlohmann::json(by_status).dump());
      });
      if (outcome.kind == events::CompletionOutcome::kCompleted) {
        ++report.completed;
        ++completed_;
        spdlog::info("BATCH_COMPLETED batch={} event={} topic={} total={} by_status={}", VisibleText(b.batch_code),
                     VisibleText(e.code), e.topic, *total, FormatByStatus(by_status));
      } else if (outcome.kind == events::CompletionOutcome::kConflict) {
        ++report.conflicts;
        ++conflicts_;
        spdlog::error("BATCH_COMPLETION_CONFLICT batch={} event={} service={} reason={}", VisibleText(b.batch_code),
                      VisibleText(e.code), b.service, VisibleText(outcome.conflict));
      }
    }
    if (static_cast<int>(open.size()) < kPage) break;
    after = open.back().batch_code;
  }
  ++checks_;
  return report;
}

}  // namespace dsync::dispatcher
