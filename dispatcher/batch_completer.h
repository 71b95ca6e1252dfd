// The leader's batch completion check (events/batches.h, V012 distribute_batch): every
// dispatcher.batch_check_interval_ms, for each OPEN batch, one GROUP BY status over the
// batch's events (idx_batch_code); when the batch has events (at least its
// expected_events, when set) and all are terminal, one transaction locks the batch's
// row, counts again (the counts that decide are the ones in the payload: an event
// added meanwhile keeps the batch open or is counted), produces its completion event
// and marks it COMPLETED. Logged:
//   BATCH_COMPLETED batch=<code> event=<completion code> topic=<topic> total=<n> by_status=SUCCESS:<n>,...
// When an event this completer did not produce already holds the completion code (a
// producer wrote it by hand), the batch is marked CONFLICT with the reason instead
// (events/batches.h) and nothing is produced; logged at error level:
//   BATCH_COMPLETION_CONFLICT batch=<code> event=<completion code> service=<s> reason=<which event>
//
// The completion event: code events::CompletionCode(service, batch), topic and tenant_id from
// the row, data_id = the batch code, trace_id = the batch code, max_retry and priority
// from the topic's settings (defaults for a topic this process does not know), payload
// = the row's on_complete_payload (a JSON object; {} when empty) with "batch":
// {"code", "total", "by_status": {status: n}} added. A stored payload that is not a
// JSON object (or nests deeper than 64 levels) is not parsed: the event gets
// {"batch": ..., "on_complete_payload_error": "<why>"} instead, so a hostile row
// cannot stop the check.
//
// Thread safety: CheckOnce from one thread at a time; stats() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "config/settings.h"
#include "core/service.h"
#include "storage/connection_pool.h"

namespace dsync::dispatcher {

struct BatchCheckReport {
  uint64_t open = 0;       // OPEN batches looked at
  uint64_t completed = 0;  // completion events produced by this check
  uint64_t conflicts = 0;  // batches marked CONFLICT by this check
};

// The completion event's payload for a stored on_complete_payload text (see above).
nlohmann::json CompletionPayload(const std::string& stored_payload, const std::string& batch_code,
                                 const std::map<std::string, int64_t>& by_status);

// The completer's options (part of DispatcherOptions; app/options.h).
struct BatchCompleterOptions {
  std::string service = kDefaultService;        // service: only its batches; the completion events'. Default kbs-sync
  // topics: max_retry and priority of the completion topics (a topic not here:
  // TopicSettings' defaults). Default {}
  std::map<std::string, TopicSettings> topics;
};

class BatchCompleter {
 public:
  // `pool` must outlive it.
  BatchCompleter(storage::ConnectionPool& pool, BatchCompleterOptions options);

  // One check of every OPEN batch, stopping early when `keep_going` says no. Throws
  // DbError (completions committed before stay committed).
  BatchCheckReport CheckOnce(const std::function<bool()>& keep_going);

  uint64_t checks() const { return checks_.load(); }
  uint64_t completed() const { return completed_.load(); }
  uint64_t conflicts() const { return conflicts_.load(); }

 private:
  storage::ConnectionPool& pool_;
  const std::string service_;  // only this service's batches
  const std::map<std::string, TopicSettings> topics_;
  std::atomic<uint64_t> checks_{0}, completed_{0}, conflicts_{0};
};

}  // namespace dsync::dispatcher
