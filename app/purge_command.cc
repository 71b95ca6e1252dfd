// `dsync purge --older-than DURATION [--status S] [--archive] [--dry-run] [--json]`:
// retention on demand (dispatcher/retention.h, events/purge.h). Removes terminal
// events finished longer than DURATION ago, with their steps, in batches of
// retention.batch_size (moving them to the archive tables with --archive or
// retention.archive), and registry rows silent longer than registry.purge_after_ms;
// prints the counts. --dry-run counts the same rows and writes nothing.
#include <charconv>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/command_support.h"
#include "core/error.h"
#include "core/log.h"
#include "core/visible_text.h"
#include "dispatcher/retention.h"
#include "events/purge.h"
#include "registry/offline_sweeper.h"

namespace dsync::app {

// The longest duration accepted: 100 years. A longer one means "everything ever" to
// nobody, and past about 292 years the microseconds the SQL is given no longer fit in
// 64 bits: 213503618d once wrapped to a negative interval, a cutoff in the future, and
// purged every finished event.
constexpr int64_t kMaxDurationMs = 36500LL * 86400000;

// "90s", "15m", "12h", "7d", "500ms" (a number and a unit) -> milliseconds, at most
// kMaxDurationMs. Throws UsageError.
Millis ParseDuration(const std::string& name, const std::string& text) {
  struct Unit {
    const char* suffix;
    int64_t ms;
  };
  static const Unit kUnits[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
  const auto bad = [&] {
    return UsageError("--" + name + " must be a number and a unit (ms, s, m, h, d), e.g. 7d or 12h; got '" +
                      text.substr(0, 64) + "'");
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 12) throw bad();
  const std::string unit = text.substr(digits);
  for (const Unit& u : kUnits) {
    if (unit != u.suffix) continue;
    int64_t n = 0;
    std::from_chars(text.data(), text.data() + digits, n);  // 12 digits at most: fits
    if (n > kMaxDurationMs / u.ms) {
      throw UsageError("--" + name + " must be at most 36500d (100 years); got '" + text.substr(0, 64) + "'");
    }
    return Millis(n * u.ms);
  }
  throw bad();
}

int RunPurge(const Invocation& inv) {
  auto older = inv.Get("older-than");
  if (!older) throw UsageError("--older-than is required (e.g. --older-than 7d)");
  events::PurgeSelector selector;
  selector.older_than = ParseDuration("older-than", *older);
  if (auto statuses = inv.Get("status")) {
    for (const std::string& s : SplitList(*statuses)) {
      if (!events::IsTerminalStatus(s)) {
        throw UsageError("--status '" + s.substr(0, 64) + "' is not a terminal status: only SUCCESS, COMPENSATED "
                         "and FAILED events are ever purged");
      }
      selector.statuses.push_back(s);
    }
    if (selector.statuses.empty()) throw UsageError("--status needs at least one status");
  } else {
    selector.statuses = events::TerminalStatuses();
  }
  Settings s = ResolveSettings(inv);
  SetupLogging(inv.Get("log-level").value_or("warn"), "cli");
  selector.service = s.service;
  const bool dry_run = inv.Flag("dry-run");
  const bool archive = inv.Flag("archive") || s.retention.archive;
  auto pool = OpenDatabase(s);
  registry::OfflineSweeper registry(*pool, s.service, s.registry.offline_timeout, s.registry.purge_after);

  events::PurgeCounts counts;
  uint64_t nodes = 0;
  if (dry_run) {
    counts = pool->Run("count purgeable", [&](storage::Connection& c) { return events::CountPurgeable(c, selector); });
    nodes = registry.CountPurgeable();
  } else {
    SystemClock clock;
    events::Purger purger(archive, s.retention.batch_size);
    counts = dispatcher::Retention::Purge(*pool, clock, purger, selector, Millis(0), 0, std::stop_token(),
                                          [] { return true; });
    nodes = registry.Purge();
  }
  if (inv.Flag("json")) {
    std::cout << JsonForTerminal(nlohmann::json{{"dry_run", dry_run},
                                {"archive", archive},
                                {"events", counts.events},
                                {"steps", counts.steps},
                                {"by_status", counts.by_status},
                                {"batches", counts.batches},
                                {"registry_rows", nodes}})
              << "\n";
  } else {
    std::cout << (dry_run ? "would " : "") << (archive ? "archive" : "delete") << " events=" << counts.events
              << " steps=" << counts.steps << " by_status=" << VisibleText(dispatcher::FormatByStatus(counts.by_status))
              << " registry_rows=" << nodes;
    if (!dry_run) std::cout << " batches=" << counts.batches;
    std::cout << "\n";
  }
  return 0;
}

}  // namespace dsync::app
