// `dsync pause TOPIC` / `dsync resume TOPIC` (a row of dsync_topic_pause: the dispatcher
// leader assigns none of the topic's events while it exists; running events finish),
// `dsync topics` (the service's topics: configured, paused with who and when, PENDING
// counts) and `dsync schedules` (config `schedules` with their next and last runs from
// dsync_schedule). All through api::ControlStore, as the HTTP API. Human tables by
// default, the API's JSON with --json; stored text escaped (Cell).
#include "app/control_commands.h"

#include <unistd.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "api/control_store.h"
#include "app/command_support.h"
#include "app/options.h"
#include "core/clock.h"
#include "core/process.h"

namespace dsync::app {
namespace {

const OptionSpec kControlServiceOption{"service", true, ServiceHelp("service name")};

// Who pauses from this shell: --by, else $USER (or the uid) @ this host.
std::string PausedBy(const Invocation& inv) {
  if (auto by = inv.Get("by")) return *by;
  const char* user = std::getenv("USER");
  const std::string who = user != nullptr && *user != '\0' ? user : "uid" + std::to_string(getuid());
  return who + "@" + Hostname();
}

struct ControlParts {
  OperatorStore op;
  SystemClock clock;
  std::unique_ptr<api::ControlStore> control;
};

std::unique_ptr<ControlParts> OpenControl(const Invocation& inv) {
  auto p = std::make_unique<ControlParts>();
  p->op = OpenOperatorStore(inv);
  p->control = std::make_unique<api::ControlStore>(*p->op.pool, StoreOptionsFrom(p->op.settings), p->clock);
  return p;
}

std::string OrNone(const std::string& s, const char* none) { return s.empty() ? none : s; }

}  // namespace

std::vector<CommandSpec> ControlCommandSpecs() {
  return {
      {"pause",
       "pause a topic: the dispatcher assigns none of its events until `dsync resume`; events already "
       "assigned or running finish (a row in dsync_topic_pause, seen by every dispatcher, kept across restarts)",
       "TOPIC",
       1,
       1,
       {{"reason", true, "why (shown by dsync topics, the console and the attention view)"},
        {"by", true, "who pauses (default $USER@host)"},
        kControlServiceOption,
        kJsonOption}},
      {"resume",
       "resume a paused topic: its due events are assigned again from the next dispatch cycle",
       "TOPIC",
       1,
       1,
       {kControlServiceOption, kJsonOption}},
      {"topics",
       "list the service's topics: configured here, paused (by whom, when, why), PENDING events",
       "",
       0,
       0,
       {kControlServiceOption, kJsonOption}},
      {"schedules",
       "list the config's schedules with their next tick and last run (dsync_schedule, written by the dispatcher "
       "leader)",
       "",
       0,
       0,
       {kControlServiceOption, kJsonOption}},
  };
}

int RunPause(const Invocation& inv) {
  auto p = OpenControl(inv);
  const std::string& topic = inv.args.at(0);
  const api::PauseResult r = p->control->Pause(topic, PausedBy(inv), inv.Get("reason").value_or(""));
  if (inv.Flag("json")) {
    PrintJson(api::ToJson(r));
    return 0;
  }
  if (r.created) {
    std::cout << "topic " << Cell(topic, 50) << " paused by " << Cell(r.pause.paused_by, 128) << " at "
              << r.pause.paused_at << ": no event of it is assigned until `dsync resume " << Cell(topic, 50)
              << "`; running events finish\n";
  } else {
    std::cout << "topic " << Cell(topic, 50) << " was already paused by " << Cell(r.pause.paused_by, 128) << " at "
              << r.pause.paused_at << (r.pause.reason.empty() ? "" : " (" + Cell(r.pause.reason, 200) + ")")
              << "; left as it is\n";
  }
  if (!p->op.settings.topics.empty() && !p->op.settings.topics.count(topic)) {
    std::cout << "note: this config defines no topic " << Cell(topic, 50) << " (service " << p->op.settings.service
              << ")\n";
  }
  return 0;
}

int RunResume(const Invocation& inv) {
  auto p = OpenControl(inv);
  const api::ResumeResult r = p->control->Resume(inv.args.at(0));
  if (inv.Flag("json")) {
    PrintJson(api::ToJson(r));
    return 0;
  }
  if (r.ended) {
    std::cout << "topic " << Cell(r.topic, 50) << " resumed (paused by " << Cell(r.ended->paused_by, 128) << " at "
              << r.ended->paused_at << "): its due events are assigned from the next dispatch cycle\n";
  } else {
    std::cout << "topic " << Cell(r.topic, 50) << " was not paused\n";
  }
  return 0;
}

int RunTopics(const Invocation& inv) {
  auto p = OpenControl(inv);
  const std::vector<api::TopicRow> rows = p->control->Topics();
  if (inv.Flag("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& t : rows) out.push_back(api::ToJson(t));
    PrintJson({{"service", p->op.settings.service}, {"topics", out}});
    return 0;
  }
  // Topics (up to 50 characters) and who paused them (up to 128) are printed whole.
  const int topic_w = ColumnWidth(rows, [](const api::TopicRow& t) { return t.topic; }, 29, 50);
  const int by_w = ColumnWidth(
      rows, [](const api::TopicRow& t) { return t.pause ? t.pause->paused_by : std::string("-"); }, 25, 128);
  std::cout << std::left << std::setw(topic_w) << "TOPIC" << std::setw(8) << "STATE" << std::setw(10) << "PENDING"
            << std::setw(12) << "CONFIGURED" << std::setw(by_w) << "PAUSED_BY" << std::setw(26) << "PAUSED_AT"
            << "REASON\n";
  for (const auto& t : rows) {
    std::cout << std::left << std::setw(topic_w) << Cell(t.topic, 50) << std::setw(8)
              << (t.pause ? "paused" : "active") << std::setw(10) << t.pending << std::setw(12)
              << (t.configured ? "yes" : "no") << std::setw(by_w) << (t.pause ? Cell(t.pause->paused_by, 128) : "-")
              << std::setw(26) << (t.pause ? t.pause->paused_at : "-")
              << (t.pause ? Cell(OrNone(t.pause->reason, "-"), 200) : "-") << "\n";
  }
  if (rows.empty()) std::cout << "(no topic: none configured, paused or pending)\n";
  return 0;
}

int RunSchedules(const Invocation& inv) {
  auto p = OpenControl(inv);
  const std::vector<api::ScheduleRow> rows = p->control->Schedules();
  if (inv.Flag("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& s : rows) out.push_back(api::ToJson(s));
    PrintJson({{"service", p->op.settings.service}, {"schedules", out}});
    return 0;
  }
  // Names and topics (up to 50 characters) and cron expressions (six fields with lists and
  // ranges run long; dsync_schedule.cron holds 255) are printed whole.
  const int name_w = ColumnWidth(rows, [](const api::ScheduleRow& s) { return s.name; }, 23, 50);
  const int cron_w = ColumnWidth(rows, [](const api::ScheduleRow& s) { return s.cron; }, 17, 255);
  const int topic_w = ColumnWidth(rows, [](const api::ScheduleRow& s) { return s.topic; }, 21, 50);
  std::cout << std::left << std::setw(name_w) << "NAME" << std::setw(cron_w) << "CRON (UTC)" << std::setw(topic_w)
            << "TOPIC" << std::setw(10) << "MISSED" << std::setw(36) << "NEXT" << std::setw(26) << "LAST_TICK"
            << std::setw(26) << "LAST_RUN_AT" << std::setw(9) << "SKIPPED" << "LAST_EVENT\n";
  for (const auto& s : rows) {
    std::string next = OrNone(s.next_tick, "-");
    if (!s.next_tick.empty() && !s.has_state) next += " (computed)";
    std::cout << std::left << std::setw(name_w) << Cell(s.name, 50) << std::setw(cron_w) << Cell(s.cron, 255)
              << std::setw(topic_w) << Cell(s.topic, 50) << std::setw(10) << (s.configured ? s.missed : "(gone)")
              << std::setw(36) << next << std::setw(26) << OrNone(s.last_tick, "never") << std::setw(26)
              << OrNone(s.last_run_at, "-") << std::setw(9) << s.skipped_ticks
              << Cell(OrNone(s.last_event_code, "-"), 64) << "\n";
  }
  if (rows.empty()) std::cout << "(no schedule: the config has no `schedules`)\n";
  return 0;
}

}  // namespace dsync::app
