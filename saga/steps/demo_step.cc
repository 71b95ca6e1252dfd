#include "saga/steps/demo_step.h"

#include <unistd.h>

#include "core/error.h"
#include "events/rows.h"

namespace dsync::saga {
namespace {

// Params: idempotency key.
constexpr const char* kDeleteLedger = "DELETE FROM demo_ledger WHERE idempotency_key = ?";

// Params: event code, step name, idempotency key, op, writer attempt, writer pid,
// owner attempt, owner status, owner node. The owner columns are read just before
// (events::ReadOwner), inside the step's fenced transaction (which holds the event's
// row lock): the owner as the database sees it at the moment of the write (NULL if
// the event row were missing).
constexpr const char* kAudit = R"(
INSERT INTO demo_ledger_audit (event_code, step_name, idempotency_key, op, writer_attempt,
                               writer_pid, owner_attempt, owner_status, owner_node)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?))";

void Audit(StepContext& ctx, const char* op) {
  storage::Connection& c = ctx.tx();
  const events::EventOwner owner = events::ReadOwner(c, ctx.event_code());
  c.Execute(kAudit, ctx.event_code(), ctx.step_name(), ctx.idempotency_key(), op, ctx.attempt(),
            static_cast<int>(::getpid()), owner.attempt, owner.status, owner.node_address);
}

[[noreturn]] void Bad(const std::string& path, const std::string& why) {
  throw PermanentStepError("demo: payload demo" + (path.empty() ? "" : "." + path) + " " + why);
}

// A non-negative integer (N) or one of the words; returns the integer, -1 for the word.
int CountOrWord(const nlohmann::json& v, const std::string& path, const char* word) {
  if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= 1'000'000) {
    return static_cast<int>(v.get<int64_t>());
  }
  if (v.is_string() && v.get<std::string>() == word) return -1;
  Bad(path, std::string("must be a non-negative integer or \"") + word + "\", got " + v.dump());
}

class DemoStep final : public StepHandler {
 public:
  StepResult Execute(StepContext& ctx) override {
    DemoBehaviour b = ParseDemoBehaviour(ctx.payload(), ctx.step_name());
    if (b.sleep.count() > 0 && !ctx.clock().SleepFor(b.sleep, ctx.stop_token())) {
      return StepResult::Transient("demo: interrupted while sleeping (deadline or shutdown)");
    }
    if (b.fail_permanently) return StepResult::Permanent("demo: injected permanent failure");
    if (ctx.step_retry_count() < b.fail_transient_times) {
      return StepResult::Transient("demo: injected transient failure " +
                                   std::to_string(ctx.step_retry_count() + 1) + " of " +
                                   std::to_string(b.fail_transient_times));
    }
    ctx.InsertAtCommit(kDemoLedgerHead, kDemoLedgerTail,
                       {ctx.idempotency_key(), ctx.event_code(), ctx.step_name()});
    if (b.audit) Audit(ctx, "apply");
    return StepResult::Ok({{"ledger", ctx.idempotency_key()}},
                          nlohmann::json{{"ledger", ctx.idempotency_key()}});
  }

  StepResult Compensate(StepContext& ctx) override {
    DemoBehaviour b = ParseDemoBehaviour(ctx.payload(), ctx.step_name());
    if (b.compensation_sleep.count() > 0 && !ctx.clock().SleepFor(b.compensation_sleep, ctx.stop_token())) {
      return StepResult::Transient("demo: interrupted while sleeping in compensation (deadline or shutdown)");
    }
    if (b.fail_compensation_always) {
      return StepResult::Transient("demo: injected compensation failure (always)");
    }
    if (ctx.step_retry_count() < b.fail_compensation_times) {
      return StepResult::Transient("demo: injected compensation failure " +
                                   std::to_string(ctx.step_retry_count() + 1) + " of " +
                                   std::to_string(b.fail_compensation_times));
    }
    ctx.tx().Execute(kDeleteLedger, ctx.idempotency_key());
    if (b.audit) Audit(ctx, "undo");
    return StepResult::Ok();
  }
};

}  // namespace

DemoBehaviour ParseDemoBehaviour(const nlohmann::json& payload, const std::string& step_name) {
  DemoBehaviour b;
  if (!payload.is_object()) return b;
  auto demo = payload.find("demo");
  if (demo == payload.end() || demo->is_null()) return b;
  if (!demo->is_object()) Bad("", "must be an object, got " + demo->dump());
  for (const auto& [key, value] : demo->items()) {
    if (key == "sleep_ms" || key == "compensation_sleep_ms") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
          value.get<int64_t>() > 3'600'000) {
        Bad(key, "must be an integer from 0 to 3600000, got " + value.dump());
      }
      (key == "sleep_ms" ? b.sleep : b.compensation_sleep) = Millis(value.get<int64_t>());
    } else if (key == "fail" || key == "fail_compensation") {
      if (!value.is_object()) Bad(key, "must be an object of step name -> rule, got " + value.dump());
      auto rule = value.find(step_name);
      if (rule == value.end()) continue;
      if (key == "fail") {
        int n = CountOrWord(*rule, key + "." + step_name, "permanent");
        if (n < 0) b.fail_permanently = true; else b.fail_transient_times = n;
      } else {
        int n = CountOrWord(*rule, key + "." + step_name, "always");
        if (n < 0) b.fail_compensation_always = true; else b.fail_compensation_times = n;
      }
    } else if (key == "audit") {
      if (!value.is_boolean()) Bad(key, "must be true or false, got " + value.dump());
      b.audit = value.get<bool>();
    } else {
      Bad(key, "is not a demo option (sleep_ms, compensation_sleep_ms, fail, fail_compensation, audit)");
    }
  }
  return b;
}

std::unique_ptr<StepHandler> MakeDemoStep(const StepSpec& spec) {
  if (!spec.params.empty()) {
    throw ConfigError("demo step '" + spec.name + "' takes no parameters, got '" +
                      spec.params.begin().key() + "'");
  }
  return std::make_unique<DemoStep>();
}

}  // namespace dsync::saga
