// `dsync capture`, `dsync capture resume NAME`, `dsync captures` (app/capture_command.h).
//
// `dsync capture` runs one CaptureRunner per capture of the config, each on its own
// thread; every process running it for the same service competes for each capture's
// lease, so several may run for availability (one reads, the others wait).
#include "app/capture_command.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "app/command_support.h"
#include "capture/capture_events.h"
#include "capture/capture_runner.h"
#include "capture/capture_store.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "dispatcher/lease_lock.h"
#include "events/status.h"
#include "saga/steps/capture_step.h"

namespace dsync::app {
namespace {

using nlohmann::json;

// The source URL of a capture; UsageError when the datasource is not configured.
std::string SourceUrl(const Settings& s, const std::string& name, const CaptureSettings& c) {
  auto it = s.datasources.find(c.source);
  if (it == s.datasources.end()) throw UsageError("capture " + name + ": unknown source datasource '" + c.source + "'");
  return it->second;
}

int RunCaptureResume(const Invocation& inv) {
  if (inv.args.size() != 2) throw UsageError("usage: dsync capture resume NAME");
  const std::string name = inv.args[1];
  Settings s = ResolveSettings(inv);
  SetupLogging(inv.Get("log-level").value_or("warn"), "cli");
  auto pool = OpenDatabase(s);
  capture::CaptureStore store(*pool, s.service);
  const json paused = store.Resume(name, inv.Flag("restart"));
  if (inv.Flag("json")) {
    PrintJson({{"capture", name}, {"resumed_tables", paused}});
  } else {
    std::cout << "capture " << name << (inv.Flag("restart") ? " restarts (a full copy, then the binlog)" : " resumed");
    if (paused.is_object() && !paused.empty()) {
      std::string tables;
      for (const auto& [t, _] : paused.items()) tables += (tables.empty() ? "" : ", ") + t;
      std::cout << " (tables " << tables << ": copied again in full, then captured)";
    }
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

CaptureComponent::CaptureComponent(storage::ConnectionPool& pool, const Settings& s, Clock& clock)
    : holder_(dispatcher::MakeLeaseOwnerId()) {
  for (const auto& [name, c] : s.captures) {
    capture::CaptureEnv env;
    env.framework = &pool;
    env.service = s.service;
    env.holder = holder_;
    env.source_url = SourceUrl(s, name, c);
    env.options.lease_ttl = s.dispatcher.lease_ttl;
    env.clock = &clock;
    runners_.push_back(std::make_unique<capture::CaptureRunner>(name, c, env));
  }
}

CaptureComponent::~CaptureComponent() { Stop(); }

std::vector<std::pair<std::string, const capture::RunnerStats*>> CaptureComponent::Stats() const {
  std::vector<std::pair<std::string, const capture::RunnerStats*>> out;
  for (const auto& r : runners_) out.emplace_back(r->name(), &r->stats());
  return out;
}

void CaptureComponent::Start() {
  for (auto& r : runners_) threads_.emplace_back([&r](std::stop_token st) { r->Run(st); });
}

void CaptureComponent::Stop() {
  for (auto& t : threads_) t.request_stop();
  threads_.clear();  // joins: each commits what it read, then releases its lease
}

std::vector<CommandSpec> CaptureCommandSpecs() {
  return {
      {"capture",
       "read the sources' binlogs and keep the config's captures in sync (one reader per capture across the "
       "cluster, by lease); `capture resume NAME` continues a paused or failed capture; SIGTERM/SIGINT stops",
       "[resume NAME]",
       0,
       2,
       {{"service", true, ServiceHelp("service name")},
        {"restart", false, "with resume: start the capture afresh (a full copy, then the binlog from the source's "
                           "position then): after a purged position or a failed copy"},
        kJsonOption}},
      {"captures",
       "list the service's captures: state, position, reader lag, counters, paused tables, last error",
       "",
       0,
       0,
       {{"service", true, ServiceHelp("service name")}, kJsonOption}},
  };
}

int RunCapture(const Invocation& inv) {
  if (!inv.args.empty()) {
    if (inv.args[0] == "resume") return RunCaptureResume(inv);
    throw UsageError("unknown capture subcommand '" + inv.args[0] + "' (expected: resume NAME)");
  }
  Settings s = ResolveSettings(inv);
  SetupLogging(s.log_level, "capture");
  if (s.captures.empty()) throw UsageError("the config has no captures (config key `captures`; docs/capture.md)");
  auto pool = OpenDatabase(s, CaptureComponent::Connections(s) + 2);
  // Refusals at start: one line each, exit 1, nothing written.
  for (const auto& [name, c] : s.captures) {
    capture::CaptureStore store(*pool, s.service);
    auto row = store.Read(name);
    try {
      capture::Preflight(name, c, SourceUrl(s, name, c), row && row->state == "RUNNING" ? row->gtid : "");
    } catch (const capture::PreflightError& e) {
      std::cerr << "dsync: " << e.what() << "\n";
      return 1;
    } catch (const std::exception& e) {
      // Not a refusal (the source is unreachable for now): the reader keeps trying.
      spdlog::warn("CAPTURE_PREFLIGHT_DEFERRED capture={} err=\"{}\"", name, storage::MaskPasswords(e.what()));
    }
  }
  sigset_t signals = BlockStopSignals();
  SystemClock clock;
  CaptureComponent captures(*pool, s, clock);
  spdlog::info("CAPTURE_RUNNING holder={} service={} captures={} db={}", captures.holder(), s.service,
               captures.size(), pool->url().Masked());
  captures.Start();
  spdlog::info("CAPTURE_STOPPING holder={} signal={}", captures.holder(), WaitForStopSignal(signals));
  captures.Stop();
  spdlog::info("CAPTURE_STOPPED holder={}", captures.holder());
  return 0;
}

int RunCaptures(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(inv.Get("log-level").value_or("warn"), "cli");
  auto pool = OpenDatabase(s);
  capture::CaptureStore store(*pool, s.service);
  const std::vector<capture::CaptureRow> rows = store.List();
  if (inv.Flag("json")) {
    PrintJson(store.ListJson());
    return 0;
  }
  std::map<std::string, capture::CaptureStore::Backlog> backlog = store.Backlogs();
  std::cout << std::left << std::setw(16) << "NAME" << std::setw(10) << "STATE" << std::setw(24) << "POSITION"
            << std::setw(11) << "READ_LAG" << std::setw(18) << "LAG_P50/P99" << std::setw(10) << "KEYS/S"
            << std::setw(12) << "ROWS" << std::setw(10) << "PENDING" << std::setw(8) << "FAILED" << "READER\n";
  for (const auto& r : rows) {
    std::ostringstream lag, applied, rate;
    if (r.lag_s) lag << *r.lag_s << "s";
    const capture::CaptureStore::ApplyStats a = store.Applied(r.name);
    if (a.lag_p50_ms) applied << *a.lag_p50_ms << "/" << *a.lag_p99_ms << "ms";
    rate << std::fixed << std::setprecision(1) << a.keys_per_s;
    std::cout << std::left << std::setw(16) << Cell(r.name, 15) << std::setw(10) << r.state << std::setw(24)
              << Cell(r.gtid.empty() ? "-" : r.gtid, 23) << std::setw(11) << (r.lag_s ? lag.str() : "-")
              << std::setw(18) << (a.lag_p50_ms ? applied.str() : "-") << std::setw(10) << rate.str() << std::setw(12)
              << r.row_changes << std::setw(10) << backlog[r.name].pending << std::setw(8) << backlog[r.name].failed
              << (r.lease_live ? Cell(r.holder, 60) : "(none)") << "\n";
    if (r.paused.is_object()) {
      for (const auto& [t, why] : r.paused.items()) {
        std::cout << "    paused " << Cell(t, 64) << ": " << Cell(why.is_string() ? why.get<std::string>() : why.dump(), 200)
                  << " (align the target, then: dsync capture resume " << r.name << ")\n";
      }
    }
    if (!r.last_error.empty()) std::cout << "    last error: " << Cell(r.last_error, 300) << "\n";
  }
  if (rows.empty()) std::cout << "(no captures have run for service " << s.service << ")\n";
  return 0;
}

std::map<std::string, TopicSettings> WithCaptureTopic(std::map<std::string, TopicSettings> topics, const Settings& s) {
  if (!s.captures.empty()) topics.emplace(capture::kCaptureTopic, saga::CaptureTopic());
  return topics;
}

saga::StepRegistry WithCaptureStep(saga::StepRegistry registry, const Settings& s) {
  saga::RegisterCaptureStep(registry, s.captures);
  return registry;
}

std::vector<std::string> ServingCaptureTopic(std::vector<std::string> topics, const Settings& s) {
  const bool all = topics.empty() || std::find(topics.begin(), topics.end(), "*") != topics.end();
  if (!s.captures.empty() && !all && std::find(topics.begin(), topics.end(), capture::kCaptureTopic) == topics.end()) {
    topics.push_back(capture::kCaptureTopic);
  }
  return topics;
}

}  // namespace dsync::app
