#include "tests/support/saga_invariants.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>

#include "saga/event_run.h"

namespace dsync::testing {

namespace {

struct Step {
  std::string code;
  std::vector<int> key;  // tree position
  std::string status;
  std::optional<int64_t> executed_us;
  std::optional<int64_t> compensated_us;
};

// Step codes are parsed by the engine's own reader (saga/event_run.h): "<event>#2.3" -> {2, 3}.
using saga::run::TreeKey;

std::vector<std::string> CheckEvent(const std::string& event, const std::string& status,
                                           std::vector<Step> steps) {
  std::vector<std::string> bad;
  auto fail = [&](const std::string& what) { bad.push_back("event " + event + " (" + status + "): " + what); };
  for (const Step& s : steps) {
    if (s.key.empty()) fail("step code '" + s.code + "' is not <event>#<position>[.<n>]");
  }
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.key < b.key; });

  size_t k = 0;  // forward prefix: steps that reached SUCCESS
  while (k < steps.size() && steps[k].executed_us) ++k;
  for (size_t i = k; i < steps.size(); ++i) {
    if (steps[i].executed_us) fail("step " + steps[i].code + " executed after a step that never did");
    if (steps[i].status == "SUCCESS") fail("step " + steps[i].code + " SUCCESS without executed_at");
  }
  for (size_t i = 1; i < k; ++i) {
    if (*steps[i].executed_us < *steps[i - 1].executed_us) {
      fail("step " + steps[i].code + " executed before " + steps[i - 1].code);
    }
  }
  // The compensation zone: the executed prefix, plus the step after it if it was
  // compensated: it failed having saved compensation data, or it was interrupted
  // mid-flight when the retries ran out and its handler undoes interrupted attempts
  // (StepHandler::CompensatesInterrupted, docs/event-lifecycle.md "Steps").
  size_t zone = k;
  if (k < steps.size() && (steps[k].status == "COMPENSATING" || steps[k].status == "COMPENSATED")) zone = k + 1;
  for (size_t i = zone; i < steps.size(); ++i) {
    const std::string& st = steps[i].status;
    if (st != "PENDING" && st != "EXECUTING" && st != "FAILED") {
      fail("step " + steps[i].code + " is " + st + " but neither ran nor failed");
    }
  }
  // SUCCESS* COMPENSATING? COMPENSATED* over the zone.
  int stage = 0;  // 0 SUCCESS, 1 COMPENSATING seen, 2 COMPENSATED
  for (size_t i = 0; i < zone; ++i) {
    const std::string& st = steps[i].status;
    int s = st == "SUCCESS" ? 0 : st == "COMPENSATING" ? 1 : st == "COMPENSATED" ? 2 : -1;
    if (i < k && s < 0) {
      fail("step " + steps[i].code + " reached SUCCESS once but is now " + st);
      continue;
    }
    if (s < stage || (s == 1 && stage == 1)) {
      fail("step " + steps[i].code + " is " + st + " after a later step was already being compensated "
           "(compensation not in exact reverse order)");
    }
    stage = std::max(stage, s);
    if (s == 2 && !steps[i].compensated_us) fail("step " + steps[i].code + " COMPENSATED without compensated_at");
  }
  int64_t last_execution = 0;
  for (size_t i = 0; i < k; ++i) last_execution = std::max(last_execution, *steps[i].executed_us);
  const Step* previous = nullptr;
  for (size_t i = 0; i < zone; ++i) {
    const Step& s = steps[i];
    if (s.status != "COMPENSATED" || !s.compensated_us) continue;
    if (*s.compensated_us < last_execution) fail("step " + s.code + " compensated before the last execution");
    if (previous && *previous->compensated_us < *s.compensated_us) {
      fail("step " + previous->code + " compensated before " + s.code + " (not reverse order)");
    }
    previous = &s;
  }

  if (status == "SUCCESS") {
    if (steps.empty()) fail("SUCCESS without steps");
    for (const Step& s : steps) {
      if (s.status != "SUCCESS") fail("SUCCESS but step " + s.code + " is " + s.status);
    }
  } else if (status == "COMPENSATED") {
    for (const Step& s : steps) {
      if (s.status == "SUCCESS" || s.status == "COMPENSATING" || s.status == "EXECUTING") {
        fail("COMPENSATED but step " + s.code + " is " + s.status);
      }
    }
  }
  return bad;
}

}  // namespace

// Every violation over all events of the pool's schema, one line each (empty: holds).
std::vector<std::string> SagaOrderViolations(storage::ConnectionPool& pool) {
  std::map<std::string, std::string> status;
  std::map<std::string, std::vector<Step>> steps;
  pool.Run("saga invariant: read", [&](storage::Connection& c) {
    status.clear();
    steps.clear();
    auto events = c.Query("SELECT code, status FROM distribute_event");
    while (events->next()) status[events->getString(1)] = events->getString(2);
    auto rows = c.Query(R"(
SELECT job_code, code, status,
       TIMESTAMPDIFF(MICROSECOND, '2000-01-01', executed_at),
       TIMESTAMPDIFF(MICROSECOND, '2000-01-01', compensated_at)
FROM distribute_event_step)");
    while (rows->next()) {
      Step s;
      s.code = rows->getString(2);
      s.key = TreeKey(s.code);
      s.status = rows->getString(3);
      if (!rows->isNull(4)) s.executed_us = rows->getInt64(4);
      if (!rows->isNull(5)) s.compensated_us = rows->getInt64(5);
      steps[rows->getString(1)].push_back(std::move(s));
    }
  });
  std::vector<std::string> bad;
  for (const auto& [code, st] : status) {
    auto more = CheckEvent(code, st, steps[code]);
    bad.insert(bad.end(), more.begin(), more.end());
  }
  return bad;
}

std::string JoinLines(const std::vector<std::string>& lines) {
  std::ostringstream out;
  for (const auto& l : lines) out << "\n  " << l;
  return out.str();
}

}  // namespace dsync::testing
