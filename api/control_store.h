// Topic pauses and schedules as the operator sees them (issue 37): what `dsync pause`,
// `dsync resume`, `dsync topics`, `dsync schedules`, the HTTP routes /v1/topics and
// /v1/schedules and the console's Topics page share, over control/topic_pause.h and
// control/scheduler.h.
//
//   api::ControlStore control(pool, app::StoreOptionsFrom(settings), clock);
//   control.Pause("SPACE_ADD", "alice@ops-1", "maintenance window");
//   for (const api::TopicRow& t : control.Topics()) ...
//
// Thread safety: as the pool; stateless otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/store_options.h"
#include "config/settings.h"
#include "control/topic_pause.h"
#include "core/clock.h"
#include "storage/connection_pool.h"

namespace dsync::api {

struct PauseResult {
  control::TopicPause pause;  // the row as stored
  bool created = false;       // false: the topic was already paused (the first pause stands)
};

struct ResumeResult {
  std::string topic;
  std::optional<control::TopicPause> ended;  // nullopt: it was not paused
};

// One topic of the service: configured, paused, or with PENDING events.
struct TopicRow {
  std::string topic;
  bool configured = false;  // in this process's config
  int64_t pending = 0;      // PENDING events of the service
  std::optional<control::TopicPause> pause;
};

// A configured schedule with its state (dsync_schedule), or a state row whose schedule
// this config no longer has.
struct ScheduleRow {
  std::string name, cron, timezone = "UTC", topic, missed;
  bool configured = false;
  bool has_state = false;   // the leader has looked at it (a dsync_schedule row exists)
  std::string next_tick;    // the row's, or computed from now when there is no row (ISO UTC)
  std::string last_tick, last_event_code, last_run_at;  // "" when it never fired
  int64_t skipped_ticks = 0;
};

class ControlStore {
 public:
  // `pool` and `clock` must outlive the store. Reads options.service, .topics, .schedules.
  ControlStore(storage::ConnectionPool& pool, const StoreOptions& options, Clock& clock);

  // Throws UsageError for a malformed topic name ("topic must be 1 to 50 characters of
  // A-Z a-z 0-9 _ . -") or an empty `by`; DbError. A pause that created the row, and a
  // resume that ended one, return only after control::kPauseSettle (220 ms): by then
  // every dispatcher's next cycle sees it (control/topic_pause.h).
  PauseResult Pause(const std::string& topic, const std::string& by, const std::string& reason);
  ResumeResult Resume(const std::string& topic);
  std::vector<TopicRow> Topics();
  std::vector<ScheduleRow> Schedules();

 private:
  storage::ConnectionPool& pool_;
  Clock& clock_;
  const std::string service_;
  const std::map<std::string, TopicSettings> topics_;
  const std::map<std::string, ScheduleSettings> schedules_;
};

nlohmann::json ToJson(const control::TopicPause& p);
nlohmann::json ToJson(const PauseResult& r);
nlohmann::json ToJson(const ResumeResult& r);
nlohmann::json ToJson(const TopicRow& t);
nlohmann::json ToJson(const ScheduleRow& s);

// The body of POST /v1/topics/{topic}/pause: {"reason"?, "by"?} (both strings; `by`
// defaults to "api"). Throws UsageError for anything else.
std::pair<std::string, std::string> ParsePauseBody(const nlohmann::json& body);  // {by, reason}

}  // namespace dsync::api
