#include "control/scheduler.h"

#include <cstdio>

#include <spdlog/spdlog.h>

#include "control/schedule_tick.h"
#include "core/error.h"
#include "events/columns.h"
#include "events/produce.h"

namespace dsync::control {
namespace {

// Times cross the statements as whole seconds since the epoch, converted in SQL by
// arithmetic on DATETIME (no time-zone conversion: independent of the session's zone).
#define DSYNC_SCHED_EPOCH(col) "TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', " col ")"
#define DSYNC_SCHED_ISO(col) "IFNULL(CONCAT(LEFT(DATE_FORMAT(" col ", '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'), '')"

// Params: service, name.
constexpr const char* kLockSchedule =
    "SELECT cron, " DSYNC_SCHED_EPOCH("next_tick") " FROM dsync_schedule WHERE service = ? AND name = ? FOR UPDATE";
// Params: service, name, cron, topic, next_tick epoch (a new schedule: nothing fired yet).
constexpr const char* kInsertSchedule =
    "INSERT INTO dsync_schedule (service, name, cron, topic, next_tick, updated_time) "
    "VALUES (?, ?, ?, ?, '1970-01-01 00:00:00' + INTERVAL ? SECOND, NOW(3))";
// Params: cron, topic, next_tick epoch, skipped, service, name.
constexpr const char* kAdvanceSchedule =
    "UPDATE dsync_schedule SET cron = ?, topic = ?, next_tick = '1970-01-01 00:00:00' + INTERVAL ? SECOND, "
    "skipped_ticks = skipped_ticks + ?, updated_time = NOW(3) WHERE service = ? AND name = ?";
// Params: last_tick epoch, last_event_code, service, name (after kAdvanceSchedule).
constexpr const char* kRecordFired =
    "UPDATE dsync_schedule SET last_tick = '1970-01-01 00:00:00' + INTERVAL ? SECOND, last_event_code = ?, "
    "last_run_at = NOW(3) WHERE service = ? AND name = ?";
// Params: service.
constexpr const char* kSelectSchedules =
    "SELECT name, cron, topic, " DSYNC_SCHED_ISO("next_tick") ", " DSYNC_SCHED_ISO("last_tick") ", "
    "IFNULL(last_event_code, ''), " DSYNC_SCHED_ISO("last_run_at") ", " DSYNC_SCHED_ISO("updated_time") ", "
    "skipped_ticks FROM dsync_schedule WHERE service = ? ORDER BY name";

constexpr size_t kMaxScheduleCode = 64;  // distribute_event.code

WallTime FromEpoch(int64_t s) { return WallTime(std::chrono::seconds(s)); }

}  // namespace

std::string ScheduleEventCode(const std::string& service, const std::string& name, WallTime tick) {
  const std::string epoch = std::to_string(EpochSeconds(tick));
  std::string code = "sched:" + service + ":" + name + ":" + epoch;
  if (code.size() <= kMaxScheduleCode && service.find(':') == std::string::npos) return code;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over service, NUL, name
  for (unsigned char ch : service) h = (h ^ ch) * 1099511628211ULL;
  h = (h ^ 0) * 1099511628211ULL;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return "sched:~" + std::string(hex) + ":" + epoch;
}

std::vector<ScheduleState> ReadScheduleStates(storage::Connection& c, const std::string& service) {
  std::vector<ScheduleState> out;
  auto rs = c.Query(kSelectSchedules, service);
  while (rs->next()) {
    events::Columns col(*rs);
    ScheduleState s;
    s.name = col.String();
    s.cron = col.String();
    s.topic = col.String();
    s.next_tick = col.String();
    s.last_tick = col.String();
    s.last_event_code = col.String();
    s.last_run_at = col.String();
    s.updated_time = col.String();
    s.skipped_ticks = col.Int64();
    out.push_back(std::move(s));
  }
  return out;
}

Scheduler::Scheduler(storage::ConnectionPool& pool, const SchedulerOptions& options, Clock& clock)
    : pool_(pool), clock_(clock), service_(options.service) {
  for (const auto& [name, s] : options.schedules) {
    Entry e{name, s, CronExpression::Parse(s.cron)};
    if (auto t = options.topics.find(s.topic); t != options.topics.end()) {
      e.priority = t->second.priority;
      e.max_retry = t->second.max_retry;
    }
    schedules_.push_back(std::move(e));
  }
}

int Scheduler::RunOnce(const std::optional<dispatcher::LeaseFence>& fence) {
  int fired = 0;
  for (const Entry& e : schedules_) {
    try {
      if (RunSchedule(e, fence)) ++fired;
    } catch (const DbError& err) {
      ++failures_;
      spdlog::warn("SCHEDULE_FAILED schedule={} service={} err={}", e.name, service_, err.what());
    }
  }
  ++passes_;
  return fired;
}

bool Scheduler::RunSchedule(const Entry& e, const std::optional<dispatcher::LeaseFence>& fence) {
  struct FencedOut {};
  struct Outcome {
    TickDecision decision;
    std::string code;
    bool inserted = false;
  };
  Outcome out;
  try {
    out = pool_.Transact("run schedule", [&](storage::Connection& c) {
      Outcome o;  // fresh on every (retried) attempt
      const WallTime now = clock_.WallNow();
      std::optional<WallTime> next_tick;
      bool exists = false;
      {
        auto rs = c.Query(kLockSchedule, service_, e.name);
        if (rs->next()) {
          exists = true;
          // A changed expression starts over: its old next_tick means nothing now.
          if (rs->getString(1) == e.settings.cron) next_tick = FromEpoch(rs->getInt64(2));
        }
      }
      o.decision = DecideTick(e.cron, e.settings.missed, e.settings.grace, next_tick, now);
      if (!o.decision.next_tick) {
        throw DbError(DbError::Kind::kOther, 0, "cron '" + e.settings.cron + "' has no tick within 29 years");
      }
      if (exists && next_tick == o.decision.next_tick && !o.decision.fire && o.decision.skipped == 0) return o;
      const int64_t next_epoch = EpochSeconds(*o.decision.next_tick);
      if (exists) {
        c.Execute(kAdvanceSchedule, e.settings.cron, e.settings.topic, next_epoch, o.decision.skipped, service_, e.name);
      } else {
        c.Execute(kInsertSchedule, service_, e.name, e.settings.cron, e.settings.topic, next_epoch);
      }
      if (o.decision.fire) {
        const WallTime tick = *o.decision.fire;
        o.code = ScheduleEventCode(service_, e.name, tick);
        nlohmann::json payload = e.settings.payload;
        payload["schedule"] = {{"name", e.name}, {"tick", FormatUtc(tick)}};
        events::NewEventRow row;
        row.tenant_id = e.settings.tenant_id;
        row.code = o.code;
        row.data_id = e.name;
        row.topic = e.settings.topic;
        row.payload = payload.dump();
        row.priority = e.priority;
        row.max_retry = e.max_retry;
        row.trace_id = o.code;
        row.service = service_;
        o.inserted = events::InsertEvent(c, row);
        c.Execute(kRecordFired, EpochSeconds(tick), o.code, service_, e.name);
      }
      if (fence && !dispatcher::HoldsLease(c, *fence)) throw FencedOut{};
      return o;
    });
  } catch (const FencedOut&) {
    spdlog::info("SCHEDULE_FENCED_OUT schedule={} service={}", e.name, service_);
    return false;
  }
  if (out.decision.fire) {
    if (out.inserted) ++fired_;
    spdlog::info("SCHEDULE_FIRED schedule={} service={} tick={} event={} topic={} skipped={}{}", e.name, service_,
                 FormatUtc(*out.decision.fire), out.code, e.settings.topic, out.decision.skipped,
                 out.inserted ? "" : " existed=true");
  } else if (out.decision.skipped > 0) {
    spdlog::warn("SCHEDULE_SKIPPED schedule={} service={} ticks={} policy={} next={}", e.name, service_,
                 out.decision.skipped, MissedTickPolicyName(e.settings.missed), FormatUtc(*out.decision.next_tick));
  }
  skipped_ += static_cast<uint64_t>(out.decision.skipped);
  return out.decision.fire && out.inserted;
}

void WriteMetrics(const SchedulerStats& s, metrics::TextWriter& w) {
  w.Family("dsync_schedule_ticks_total",
           "Schedule ticks handled by this process while leading: fired (an event produced) or skipped (the "
           "missed-tick policy passed over it).",
           metrics::Type::kCounter);
  w.Sample("dsync_schedule_ticks_total", {{"outcome", "fired"}}, static_cast<double>(s.fired));
  w.Sample("dsync_schedule_ticks_total", {{"outcome", "skipped"}}, static_cast<double>(s.skipped));
  w.Family("dsync_schedule_failures_total", "Schedule transactions that failed (retried a second later).",
           metrics::Type::kCounter);
  w.Sample("dsync_schedule_failures_total", {}, static_cast<double>(s.failures));
}

SchedulerStats Scheduler::stats() const {
  return {passes_.load(), fired_.load(), skipped_.load(), failures_.load()};
}

}  // namespace dsync::control
