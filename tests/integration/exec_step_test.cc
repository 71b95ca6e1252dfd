// The `exec` step type (saga/steps/exec_step.h) with real child processes and a real
// MariaDB: the context on stdin, stdout as output, exit 75 transient and other codes
// permanent with stderr's last lines, large outputs on both pipes without deadlock, the
// stdout bound, the deadline (TERM, then KILL for a child that ignores TERM), the
// child's group killed with it, a stop (drain) killing the child, a lost event killing
// it, compensation, and config refusals.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "saga/steps/exec_step.h"
#include "tests/support/assigned_events.h"
#include "tests/support/eventually.h"
#include "tests/support/saga_fixtures.h"
#include "tests/support/saga_test.h"

namespace dsync::saga {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// A process is gone when /proc has no entry for it or it is a zombie.
bool ProcessAlive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = all.rfind(')');
  return paren != std::string::npos && paren + 2 < all.size() && all[paren + 2] != 'Z';
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StepSpec ExecSpec(const std::string& name, json params, Millis timeout = Millis(0)) {
  StepSpec s = testing::Step(name, "exec", std::move(params));
  s.timeout = timeout;
  return s;
}

class ExecStepTest : public testing::SagaTest {
 protected:
  ExecStepTest() {
    char tmpl[] = "/tmp/dsync-exec-test.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  ~ExecStepTest() override { std::system(("rm -rf " + dir_).c_str()); }

  // A /bin/sh script in the test's directory; returns its path.
  std::string Script(const std::string& name, const std::string& body) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
    return path;
  }
  void Plan(std::vector<StepSpec> steps, int max_retry = 3) {
    TopicSettings t = testing::DemoTopic(max_retry, 10ms, 1000ms, {});
    t.steps = std::move(steps);
    topics_ = {{"EXEC", t}};
    engine_.reset();
    plans_ = std::make_unique<Plans>(topics_, StepRegistry::WithBuiltins(topics_));
    engine_ = std::make_unique<SagaEngine>(db_.pool(), *plans_, datasources_, clock_, kNodeA);
  }
  Outcome Run(const std::string& code) {
    Assign(code);
    return engine_->Run(testing::LoadAssigned(db_.pool(), code), {});
  }
  int PidFrom(const std::string& file) {
    testing::Eventually([&] { return !ReadAll(file).empty(); }, 5s);
    return std::atoi(ReadAll(file).c_str());
  }

  std::string dir_;
  std::map<std::string, TopicSettings> topics_;
  SystemClock clock_;
  Datasources datasources_{{}};
  std::unique_ptr<Plans> plans_;
  std::unique_ptr<SagaEngine> engine_;
};

TEST_F(ExecStepTest, SuccessGetsContextOnStdinAndStoresStdout) {
  ::setenv("DSYNC_EXEC_TEST_SECRET", "hunter2", 1);
  std::string prog = Script("ok.sh", "cat > \"$OUT_DIR/stdin.json\"\n"
                                     "printf '%s %s %s' \"$1\" \"$API_TOKEN\" \"$DSYNC_IDEMPOTENCY_KEY\" > \"$OUT_DIR/args\"\n"
                                     "echo '{\"indexed\": 3}'");
  Plan({testing::Step("s0"), ExecSpec("index", {{"command", {prog, "--all"}},
                                                {"env", {{"OUT_DIR", dir_}, {"API_TOKEN", "${DSYNC_EXEC_TEST_SECRET}"}}}})});
  ProduceRaw("X1", "EXEC", R"({"space": 12})");
  ASSERT_EQ(Run("X1"), Outcome::kSucceeded);
  EXPECT_EQ(json::parse(StepStr("X1#2", "output")), json::parse(R"({"indexed": 3})"));
  json in = json::parse(ReadAll(dir_ + "/stdin.json"));
  EXPECT_EQ(in["code"], "X1");
  EXPECT_EQ(in["step"], "index");
  EXPECT_EQ(in["idempotency_key"], "X1#2");
  EXPECT_EQ(in["payload"]["space"], 12);
  EXPECT_EQ(in["tenant_id"], "t1");
  EXPECT_EQ(in["data_id"], "d-X1");
  EXPECT_EQ(in["outputs"]["s0"]["ledger"], "X1#1");
  EXPECT_EQ(ReadAll(dir_ + "/args"), "--all hunter2 X1#2");
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE CONCAT_WS('|', payload, output, "
                "compensation_data, error_details) LIKE '%hunter2%'"),
            0);
  EXPECT_EQ(engine_->stats().by_type.Calls("exec", "execute", "ok"), 1u);
}

TEST_F(ExecStepTest, PlainTextOutputIsStoredAsString) {
  std::string prog = Script("text.sh", "printf 'done \\377 here'");
  Plan({ExecSpec("t", {{"command", {prog}}})});
  ProduceRaw("X2", "EXEC", "{}");
  ASSERT_EQ(Run("X2"), Outcome::kSucceeded);
  EXPECT_EQ(json::parse(StepStr("X2#1", "output")), json("done \xEF\xBF\xBD here"));
}

TEST_F(ExecStepTest, Exit75IsTransientOtherCodesPermanentWithStderr) {
  std::string flaky = Script("flaky.sh", "echo 'line one' >&2\necho 'database busy' >&2\nexit 75");
  Plan({ExecSpec("f", {{"command", {flaky}}})});
  ProduceRaw("X3", "EXEC", "{}");
  ASSERT_EQ(Run("X3"), Outcome::kRetryScheduled);
  EXPECT_EQ(StepStr("X3#1", "error_details"),
            "exec " + flaky + " exited with 75 (EX_TEMPFAIL: try again); stderr: line one | database busy");

  std::string bad = Script("bad.sh", "cat >/dev/null\necho 'no such space 12' >&2\nexit 3");
  Plan({ExecSpec("b", {{"command", {bad}}})});
  ProduceRaw("X4", "EXEC", "{}");
  ASSERT_EQ(Run("X4"), Outcome::kCompensated);
  EXPECT_EQ(StepStr("X4#1", "error_details"), "exec " + bad + " exited with 3; stderr: no such space 12");
  EXPECT_EQ(engine_->stats().by_type.Calls("exec", "execute", "permanent"), 1u);
}

TEST_F(ExecStepTest, BigOutputsOnBothPipesDoNotDeadlock) {
  // 900 KB of stdout and 4 MB of stderr, interleaved, before it reads stdin.
  std::string prog = Script("big.sh",
                            "i=0\nwhile [ $i -lt 30 ]; do head -c 30000 /dev/zero | tr '\\0' a; "
                            "head -c 140000 /dev/zero | tr '\\0' e >&2; i=$((i+1)); done\ncat >/dev/null");
  Plan({ExecSpec("big", {{"command", {prog}}}, 20000ms)});
  ProduceRaw("X5", "EXEC", "{}");
  ASSERT_EQ(Run("X5"), Outcome::kSucceeded);
  EXPECT_EQ(json::parse(StepStr("X5#1", "output")).get<std::string>().size(), 900000u);
}

TEST_F(ExecStepTest, TooMuchStdoutKillsTheChild) {
  std::string prog = Script("flood.sh", "echo $$ > \"$0.pid\"\nexec cat /dev/zero");
  Plan({ExecSpec("flood", {{"command", {prog}}, {"max_output_bytes", 100000}}, 20000ms)});
  ProduceRaw("X6", "EXEC", "{}");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Run("X6"), Outcome::kCompensated);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(StepStr("X6#1", "error_details"),
            "exec " + prog + " wrote more than 100000 bytes to stdout (max_output_bytes; killed)");
  EXPECT_FALSE(ProcessAlive(PidFrom(prog + ".pid")));
}

TEST_F(ExecStepTest, DeadlineKillsTheChildAndItsGroup) {
  // The script starts a background sleeper in its group, then sleeps itself.
  std::string prog = Script("slow.sh", "sleep 60 &\necho $! > \"$0.bg\"\necho $$ > \"$0.pid\"\nsleep 60");
  Plan({ExecSpec("slow", {{"command", {prog}}}, 500ms)});
  ProduceRaw("X7", "EXEC", "{}");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Run("X7"), Outcome::kRetryScheduled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_NE(StepStr("X7#1", "error_details").find("timed out after"), std::string::npos) << StepStr("X7#1", "error_details");
  EXPECT_TRUE(testing::Eventually([&] { return !ProcessAlive(PidFrom(prog + ".pid")); }, 2s));
  EXPECT_TRUE(testing::Eventually([&] { return !ProcessAlive(PidFrom(prog + ".bg")); }, 2s)) << "its group was killed too";
}

TEST_F(ExecStepTest, ChildIgnoringTermIsKilled) {
  std::string prog = Script("stubborn.sh", "trap '' TERM\necho $$ > \"$0.pid\"\nwhile :; do sleep 0.05; done");
  Plan({ExecSpec("stubborn", {{"command", {prog}}}, 300ms)});
  ProduceRaw("X8", "EXEC", "{}");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Run("X8"), Outcome::kRetryScheduled);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 1200ms);  // 300 ms, then TERM ignored for the 1 s grace, then KILL
  EXPECT_LT(took, 4s);
  EXPECT_FALSE(ProcessAlive(PidFrom(prog + ".pid")));
}

TEST_F(ExecStepTest, ExitedChildLeavesNothingRunningInItsGroup) {
  std::string prog = Script("leaver.sh", "sleep 60 &\necho $! > \"$0.bg\"\necho '{}'");
  Plan({ExecSpec("leaver", {{"command", {prog}}})});
  ProduceRaw("X9", "EXEC", "{}");
  ASSERT_EQ(Run("X9"), Outcome::kSucceeded);
  EXPECT_TRUE(testing::Eventually([&] { return !ProcessAlive(PidFrom(prog + ".bg")); }, 2s));
}

TEST_F(ExecStepTest, StopKillsTheChildAndAbandonsTheRun) {
  std::string prog = Script("long.sh", "echo $$ > \"$0.pid\"\nsleep 60");
  Plan({ExecSpec("long", {{"command", {prog}}}, 60000ms)});
  ProduceRaw("X10", "EXEC", "{}");
  Assign("X10");
  std::stop_source stop;
  Outcome out = Outcome::kSucceeded;
  std::thread runner([&] { out = engine_->Run(testing::LoadAssigned(db_.pool(), "X10"), stop.get_token()); });
  int pid = PidFrom(prog + ".pid");
  ASSERT_TRUE(ProcessAlive(pid));
  const auto t0 = std::chrono::steady_clock::now();
  stop.request_stop();
  runner.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(out, Outcome::kAbandoned);
  EXPECT_FALSE(ProcessAlive(pid));
  EXPECT_EQ(StepStr("X10#1", "status"), "EXECUTING");  // nothing recorded: the node hands it back
}

TEST_F(ExecStepTest, LostEventKillsTheChild) {
  std::string prog = Script("lost.sh", "echo $$ > \"$0.pid\"\nsleep 60");
  Plan({ExecSpec("long", {{"command", {prog}}}, 60000ms)});
  ProduceRaw("X11", "EXEC", "{}");
  Assign("X11");
  Outcome out = Outcome::kSucceeded;
  std::thread runner([&] { out = engine_->Run(testing::LoadAssigned(db_.pool(), "X11"), {}); });
  int pid = PidFrom(prog + ".pid");
  // What the sweeper does to an event whose node looks dead: the fence moves on.
  Exec("UPDATE distribute_event SET status = 'PENDING', node_address = NULL, version = version + 1 WHERE code = ?", "X11");
  const auto t0 = std::chrono::steady_clock::now();
  runner.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);  // checked every 2 s
  EXPECT_EQ(out, Outcome::kLostOwnership);
  EXPECT_FALSE(ProcessAlive(pid));
}

TEST_F(ExecStepTest, CompensationRunsTheUndoCommand) {
  std::string fwd = Script("fwd.sh", "cat >/dev/null\necho '{\"made\": \"thing-1\"}'");
  std::string undo = Script("undo.sh", "cat > \"$0.stdin\"\necho \"$DSYNC_IDEMPOTENCY_KEY\" > \"$0.key\"");
  Plan({ExecSpec("make", {{"command", {fwd}}, {"compensate", {{"command", {undo}}}}}), testing::Step("s2")});
  ProduceRaw("X12", "EXEC", R"({"demo": {"fail": {"s2": "permanent"}}})");
  ASSERT_EQ(Run("X12"), Outcome::kCompensated);
  EXPECT_EQ(StepStr("X12#1", "status"), "COMPENSATED");
  json in = json::parse(ReadAll(undo + ".stdin"));
  EXPECT_EQ(in["action"], "compensate");
  EXPECT_EQ(in["forward_output"], json::parse(R"({"made": "thing-1"})"));
  EXPECT_EQ(ReadAll(undo + ".key"), "X12#1-compensate\n");
}

TEST_F(ExecStepTest, MissingProgramIsPermanent) {
  Plan({ExecSpec("m", {{"command", {"/nonexistent/prog"}}})});
  ProduceRaw("X13", "EXEC", "{}");
  ASSERT_EQ(Run("X13"), Outcome::kCompensated);
  EXPECT_EQ(StepStr("X13#1", "error_details"),
            "exec /nonexistent/prog could not start: /nonexistent/prog: No such file or directory");
}

std::string ExecConfigErrorOf(json params) {
  try {
    MakeExecStep(ExecSpec("x", std::move(params)));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ExecStepConfig, BadInputIsRefusedAtLoadWithOneLine) {
  EXPECT_EQ(ExecConfigErrorOf({{"command", {"reindex", "--all"}}}),
            "exec step 'x' command[0] must be an absolute path (no shell, no PATH search), got \"reindex\"");
  EXPECT_EQ(ExecConfigErrorOf({{"command", "/bin/true"}}), "exec step 'x' command must be a non-empty array of strings");
  EXPECT_EQ(ExecConfigErrorOf(json::object()), "exec step 'x' needs \"command\": [\"/absolute/program\", \"arg\", ...]");
  EXPECT_EQ(ExecConfigErrorOf({{"command", {"/bin/true"}}, {"compensate", {{"command", {"undo"}}}}}),
            "exec step 'x' compensate.command[0] must be an absolute path (no shell, no PATH search), got \"undo\"");
  EXPECT_EQ(ExecConfigErrorOf({{"command", {"/bin/true"}}, {"env", {{"1X", "v"}}}}),
            "exec step 'x' env name \"1X\" is not NAME ([A-Za-z_][A-Za-z0-9_]*)");
  EXPECT_EQ(ExecConfigErrorOf({{"command", {"/bin/true"}}, {"shell", true}}).rfind("exec step 'x' has unknown key 'shell'", 0), 0u);
  EXPECT_EQ(ExecConfigErrorOf({{"command", {"/bin/true"}}}), "(accepted)");
}

}  // namespace
}  // namespace dsync::saga
