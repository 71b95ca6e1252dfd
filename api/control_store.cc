#include "api/control_store.h"

#include <map>
#include <tuple>

#include <spdlog/spdlog.h>

#include "api/http_text.h"
#include "control/cron.h"
#include "control/scheduler.h"
#include "core/error.h"
#include "core/visible_text.h"
#include "events/assign.h"

namespace dsync::api {
namespace {

using nlohmann::json;

json ControlTextOrNull(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

void RequireTopicName(const std::string& topic) {
  if (!control::IsPausableTopicName(topic)) {
    throw UsageError("topic must be 1 to 50 characters of A-Z a-z 0-9 _ . -");
  }
}

}  // namespace

ControlStore::ControlStore(storage::ConnectionPool& pool, const StoreOptions& options, Clock& clock)
    : pool_(pool), clock_(clock), service_(options.service), topics_(options.topics), schedules_(options.schedules) {}

PauseResult ControlStore::Pause(const std::string& topic, const std::string& by, const std::string& reason) {
  RequireTopicName(topic);
  if (by.empty()) throw UsageError("who pauses must not be empty (--by)");
  if (!IsCleanText(by) || !IsCleanText(reason)) {
    throw UsageError("by and reason must be valid UTF-8 text without control characters");
  }
  PauseResult r;
  std::tie(r.pause, r.created) = pool_.Transact(
      "pause topic", [&](storage::Connection& c) { return control::PauseTopic(c, service_, topic, by, reason); });
  if (r.created) {
    // In force for every dispatcher once they reread the pauses (control::kPauseRefresh).
    clock_.SleepFor(control::kPauseSettle, std::stop_token());
    spdlog::info("TOPIC_PAUSED service={} topic={} by=\"{}\" reason=\"{}\"", service_, topic, VisibleText(by),
                 VisibleText(reason));
  }
  return r;
}

ResumeResult ControlStore::Resume(const std::string& topic) {
  RequireTopicName(topic);
  ResumeResult r;
  r.topic = topic;
  r.ended = pool_.Transact("resume topic", [&](storage::Connection& c) { return control::ResumeTopic(c, service_, topic); });
  if (r.ended) {
    clock_.SleepFor(control::kPauseSettle, std::stop_token());  // as Pause's
    spdlog::info("TOPIC_RESUMED service={} topic={} paused_by=\"{}\" paused_at={}", service_, topic,
                 VisibleText(r.ended->paused_by), r.ended->paused_at);
  }
  return r;
}

std::vector<TopicRow> ControlStore::Topics() {
  std::map<std::string, TopicRow> rows;
  for (const auto& [name, _] : topics_) {
    rows[name].topic = name;
    rows[name].configured = true;
  }
  pool_.Run("read topics", [&](storage::Connection& c) {
    for (auto& p : control::ReadPauses(c, service_)) {
      rows[p.topic].topic = p.topic;
      rows[p.topic].pause = std::move(p);
    }
    for (const auto& [topic, n] : events::CountPendingTopics(c, service_)) {
      rows[topic].topic = topic;
      rows[topic].pending = n;
    }
  });
  std::vector<TopicRow> out;
  for (auto& [_, row] : rows) out.push_back(std::move(row));
  return out;
}

std::vector<ScheduleRow> ControlStore::Schedules() {
  std::map<std::string, ScheduleRow> rows;
  const control::WallTime now = clock_.WallNow();
  for (const auto& [name, s] : schedules_) {
    ScheduleRow& r = rows[name];
    r.name = name;
    r.cron = s.cron;
    r.timezone = s.timezone;
    r.topic = s.topic;
    r.missed = MissedTickPolicyName(s.missed);
    r.configured = true;
    if (auto next = control::CronExpression::Parse(s.cron).NextAfter(now)) {
      r.next_tick = control::FormatUtc(*next);
      r.next_tick.insert(r.next_tick.size() - 1, ".000");  // as the stored times read
    }
  }
  const std::vector<control::ScheduleState> states =
      pool_.Run("read schedules", [&](storage::Connection& c) { return control::ReadScheduleStates(c, service_); });
  for (const control::ScheduleState& st : states) {
    ScheduleRow& r = rows[st.name];
    r.name = st.name;
    r.has_state = true;
    if (!r.configured) {
      r.cron = st.cron;
      r.topic = st.topic;
    }
    // The stored next tick is the leader's, unless the config changed the expression since.
    if (!r.configured || st.cron == r.cron) r.next_tick = st.next_tick;
    r.last_tick = st.last_tick;
    r.last_event_code = st.last_event_code;
    r.last_run_at = st.last_run_at;
    r.skipped_ticks = st.skipped_ticks;
  }
  std::vector<ScheduleRow> out;
  for (auto& [_, row] : rows) out.push_back(std::move(row));
  return out;
}

json ToJson(const control::TopicPause& p) {
  return {{"paused_by", p.paused_by}, {"paused_at", p.paused_at}, {"reason", p.reason}};
}

json ToJson(const PauseResult& r) {
  return {{"topic", r.pause.topic}, {"paused", true}, {"created", r.created}, {"pause", ToJson(r.pause)}};
}

json ToJson(const ResumeResult& r) {
  return {{"topic", r.topic}, {"paused", false}, {"was_paused", r.ended.has_value()},
          {"ended", r.ended ? ToJson(*r.ended) : json(nullptr)}};
}

json ToJson(const TopicRow& t) {
  return {{"topic", t.topic}, {"configured", t.configured}, {"pending", t.pending}, {"paused", t.pause.has_value()},
          {"pause", t.pause ? ToJson(*t.pause) : json(nullptr)}};
}

json ToJson(const ScheduleRow& s) {
  return {{"name", s.name},
          {"cron", s.cron},
          {"timezone", s.timezone},
          {"topic", s.topic},
          {"missed", ControlTextOrNull(s.missed)},
          {"configured", s.configured},
          {"next_tick", ControlTextOrNull(s.next_tick)},
          {"next_tick_source", s.has_state ? "leader" : "computed"},
          {"last_tick", ControlTextOrNull(s.last_tick)},
          {"last_event_code", ControlTextOrNull(s.last_event_code)},
          {"last_run_at", ControlTextOrNull(s.last_run_at)},
          {"skipped_ticks", s.skipped_ticks}};
}

std::pair<std::string, std::string> ParsePauseBody(const json& body) {
  if (!body.is_object()) throw UsageError("the pause body must be a JSON object {\"reason\": ..., \"by\": ...}");
  std::string by = "api", reason;
  for (const auto& [key, value] : body.items()) {
    if (key != "reason" && key != "by") throw UsageError("unknown field (expected reason, by)");
    if (!value.is_string()) throw UsageError(key + " must be a string");
    (key == "by" ? by : reason) = value.get<std::string>();
  }
  if (by.size() > 128) throw UsageError("by must be at most 128 bytes");
  if (reason.size() > 512) throw UsageError("reason must be at most 512 bytes");
  return {by, reason};
}

}  // namespace dsync::api
