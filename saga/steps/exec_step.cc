#include "saga/steps/exec_step.h"

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/child_process.h"
#include "core/error.h"
#include "saga/steps/external_step.h"

namespace dsync::saga {
namespace {

constexpr size_t kExecDefaultOutputBytes = 1 << 20;
constexpr size_t kExecMaxOutputBytes = 4 << 20;
constexpr int kExecTempFail = 75;  // EX_TEMPFAIL (sysexits.h)
constexpr int kExecStderrLines = 5;

std::vector<std::string> ParseCommand(const nlohmann::json& v, const std::string& where) {
  if (!v.is_array() || v.empty()) throw ConfigError(where + " must be a non-empty array of strings");
  std::vector<std::string> argv;
  for (const auto& a : v) {
    if (!a.is_string()) throw ConfigError(where + " must be a non-empty array of strings, got " + a.dump());
    std::string s = a.get<std::string>();
    if (s.find('\0') != std::string::npos) throw ConfigError(where + " holds a NUL byte");
    argv.push_back(std::move(s));
  }
  if (argv[0].empty() || argv[0][0] != '/') {
    throw ConfigError(where + "[0] must be an absolute path (no shell, no PATH search), got \"" +
                      external::Snippet(argv[0], 80) + "\"");
  }
  return argv;
}

class ExecStep final : public StepHandler {
 public:
  ExecStep(std::string name, std::vector<std::string> command, std::vector<std::string> undo,
           std::map<std::string, std::string> env, size_t max_output)
      : name_(std::move(name)), command_(std::move(command)), undo_(std::move(undo)), env_(std::move(env)),
        max_output_(max_output) {}

  StepResult Execute(StepContext& ctx) override { return Call(ctx, command_, false); }

  StepResult Compensate(StepContext& ctx) override {
    if (undo_.empty()) return StepResult::Ok();
    return Call(ctx, undo_, true);
  }

 private:
  std::map<std::string, std::string> ChildEnv(StepContext& ctx, bool compensate) const {
    std::map<std::string, std::string> env;
    for (const char* name : {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"}) {
      if (const char* v = std::getenv(name)) env[name] = v;
    }
    if (!env.count("PATH")) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
    env["DSYNC_EVENT_CODE"] = ctx.event_code();
    env["DSYNC_STEP"] = ctx.step_name();
    env["DSYNC_IDEMPOTENCY_KEY"] = external::IdempotencyKey(ctx, compensate);
    env["DSYNC_ACTION"] = compensate ? "compensate" : "execute";
    for (const auto& [k, v] : env_) env[k] = external::ExpandEnv(v, "exec step '" + name_ + "' env " + k);
    return env;
  }

  StepResult Call(StepContext& ctx, const std::vector<std::string>& argv, bool compensate) const {
    ChildSpec spec;
    spec.argv = argv;
    spec.env = ChildEnv(ctx, compensate);
    spec.stdin_data = external::CallContext(ctx, compensate).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    spec.max_stdout_bytes = max_output_;
    auto still_owner = [&ctx] {
      try {
        return ctx.StillOwner();
      } catch (const std::exception&) {
        return true;  // the database did not answer: keep going; the fence decides at commit
      }
    };
    ChildResult r = RunChild(spec, RealDeadline(ctx.clock(), ctx.deadline()), ctx.stop_token(), still_owner);
    const std::string what = std::string(compensate ? "compensation " : "") + "exec " + external::Snippet(argv[0], 120);
    spdlog::debug("EXEC_DONE event={} step={} pid={} how=\"{}\" ms={}", ctx.event_code(), ctx.step_name(), r.pid,
                  DescribeEnd(r), r.took.count());
    auto with_stderr = [&](std::string message) {
      std::string tail = LastLines(r.err_tail, kExecStderrLines);
      if (!tail.empty()) message += "; stderr: " + external::Snippet(tail, 600);
      return message;
    };
    switch (r.end) {
      case ChildResult::End::kExited:
        if (r.exit_code == 0) {
          nlohmann::json output = external::OutputFromText(r.out);
          if (compensate) return StepResult::Ok(std::move(output));
          nlohmann::json saved = {{"output", output}};
          return StepResult::Ok(std::move(output), std::move(saved));
        }
        if (r.exit_code == kExecTempFail) {
          return StepResult::Transient(with_stderr(what + " exited with 75 (EX_TEMPFAIL: try again)"));
        }
        return StepResult::Permanent(with_stderr(what + " exited with " + std::to_string(r.exit_code)));
      case ChildResult::End::kSignaled:
        return StepResult::Transient(with_stderr(what + " " + DescribeEnd(r)));
      case ChildResult::End::kOutputTooLarge:
        return StepResult::Permanent(what + " wrote more than " + std::to_string(max_output_) +
                                     " bytes to stdout (max_output_bytes; killed)");
      case ChildResult::End::kSpawnFailed: {
        const bool resources = r.error.rfind("fork:", 0) == 0 || r.error.rfind("pipe:", 0) == 0 ||
                               r.error.rfind("socketpair:", 0) == 0 || r.error.rfind("fcntl:", 0) == 0;
        std::string message = what + " could not start: " + external::Snippet(r.error, 300);
        return resources ? StepResult::Transient(message) : StepResult::Permanent(message);
      }
      case ChildResult::End::kTimedOut:
      case ChildResult::End::kStopped:
      case ChildResult::End::kUnwanted:
        spdlog::info("EXEC_KILLED event={} step={} pid={} why=\"{}\" ms={}", ctx.event_code(), ctx.step_name(), r.pid,
                     DescribeEnd(r), r.took.count());
        return StepResult::Transient(with_stderr(what + " " + DescribeEnd(r)));
    }
    return StepResult::Transient(what + " ended unexpectedly");
  }

  const std::string name_;
  const std::vector<std::string> command_;
  const std::vector<std::string> undo_;  // empty: no compensation
  const std::map<std::string, std::string> env_;
  const size_t max_output_;
};

}  // namespace

std::unique_ptr<StepHandler> MakeExecStep(const StepSpec& spec) {
  const std::string where = "exec step '" + spec.name + "'";
  std::vector<std::string> command, undo;
  std::map<std::string, std::string> env;
  size_t max_output = kExecDefaultOutputBytes;
  bool has_command = false;
  for (const auto& [key, value] : spec.params.items()) {
    if (key == "command") {
      command = ParseCommand(value, where + " command");
      has_command = true;
    } else if (key == "compensate") {
      if (!value.is_object()) throw ConfigError(where + " compensate must be an object {\"command\": [...]}");
      for (const auto& [ck, cv] : value.items()) {
        if (ck != "command") throw ConfigError(where + " compensate." + ck + " is not a key of it (command)");
        undo = ParseCommand(cv, where + " compensate.command");
      }
      if (undo.empty()) throw ConfigError(where + " compensate needs a command");
    } else if (key == "env") {
      if (!value.is_object()) throw ConfigError(where + " env must be an object of NAME -> string");
      for (const auto& [ek, ev] : value.items()) {
        bool ok = !ek.empty() && !std::isdigit(static_cast<unsigned char>(ek[0]));
        for (char c : ek) ok = ok && (c == '_' || std::isalnum(static_cast<unsigned char>(c)));
        if (!ok) throw ConfigError(where + " env name \"" + external::Snippet(ek, 40) + "\" is not NAME ([A-Za-z_][A-Za-z0-9_]*)");
        if (!ev.is_string()) throw ConfigError(where + " env " + ek + " must be a string");
        std::string v = ev.get<std::string>();
        if (v.find('\0') != std::string::npos) throw ConfigError(where + " env " + ek + " holds a NUL byte");
        external::CheckEnvRefs(v, where + " env " + ek);
        env[ek] = std::move(v);
      }
    } else if (key == "max_output_bytes") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > static_cast<int64_t>(kExecMaxOutputBytes)) {
        throw ConfigError(where + " max_output_bytes must be an integer from 1 to " + std::to_string(kExecMaxOutputBytes));
      }
      max_output = value.get<size_t>();
    } else {
      throw ConfigError(where + " has unknown key '" + key +
                        "' (command, compensate, env, max_output_bytes, timeout_ms, max_retry)");
    }
  }
  if (!has_command) throw ConfigError(where + " needs \"command\": [\"/absolute/program\", \"arg\", ...]");
  return std::make_unique<ExecStep>(spec.name, std::move(command), std::move(undo), std::move(env), max_output);
}

}  // namespace dsync::saga
