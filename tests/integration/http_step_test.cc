// The `http` step type (saga/steps/http_step.h) against a real HTTP receiver on
// loopback (tests/support/http_receiver.h) and a real MariaDB: success with the context
// and the idempotency key, ${ENV} secrets kept out of the database, transient failures
// honouring Retry-After, permanent failures, timeouts, the compensation call after a
// later step fails, per-type metrics, and hostile receivers (10 GB bodies, endless
// chunks, one byte at a time, redirect loops, invalid UTF-8), each ending as a clear
// step error within the step's deadline.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "saga/steps/http_step.h"
#include "tests/support/assigned_events.h"
#include "tests/support/eventually.h"
#include "tests/support/fake_clock.h"
#include "tests/support/http_receiver.h"
#include "tests/support/saga_fixtures.h"
#include "tests/support/saga_test.h"

namespace dsync::saga {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Receiver = testing::HttpReceiver;
using Reply = testing::HttpReceiver::Reply;

StepSpec HttpSpec(const std::string& name, json params, Millis timeout = Millis(0)) {
  StepSpec s = testing::Step(name, "http", std::move(params));
  s.timeout = timeout;
  return s;
}

class HttpStepTest : public testing::SagaTest {
 protected:
  // Builds the engine for `steps` as topic HTTP (backoff 10..5000 ms, 3 retries), on
  // `clock` (null: the process's).
  void Plan(std::vector<StepSpec> steps, int max_retry = 3, Clock* clock = nullptr) {
    TopicSettings t = testing::DemoTopic(max_retry, 10ms, 5000ms, {});
    t.steps = std::move(steps);
    topics_ = {{"HTTP", t}};
    engine_.reset();
    plans_ = std::make_unique<Plans>(topics_, StepRegistry::WithBuiltins(topics_));
    engine_ = std::make_unique<SagaEngine>(db_.pool(), *plans_, datasources_, clock ? *clock : clock_, kNodeA);
  }
  Outcome Run(const std::string& code) {
    Assign(code);
    return engine_->Run(testing::LoadAssigned(db_.pool(), code), {});
  }
  // Makes a PENDING event due now and runs it again (a retry).
  Outcome RunAgain(const std::string& code) {
    Exec("UPDATE distribute_event SET next_run_time = NOW(3) WHERE code = ?", code);
    return Run(code);
  }
  json Output(const std::string& step_code) { return json::parse(StepStr(step_code, "output")); }

  std::map<std::string, TopicSettings> topics_;
  SystemClock clock_;
  FakeClock fake_;  // a test's engine may run on it (it outlives engine_)
  Datasources datasources_{{}};
  std::unique_ptr<Plans> plans_;
  std::unique_ptr<SagaEngine> engine_;
};

TEST_F(HttpStepTest, SuccessSendsContextKeyAndSecretAndStoresTheAnswer) {
  ::setenv("DSYNC_HTTP_TEST_TOKEN", "s3cret-value", 1);
  Receiver rx([](const Receiver::Request&) { return Reply::Answer(201, R"({"refreshed": true, "n": 7})"); });
  Plan({testing::Step("s0"),
        HttpSpec("notify", {{"url", rx.Url("/spaces/{{payload.space}}/refresh?tenant={{payload.meta.t}}")},
                            {"headers", {{"Authorization", "Bearer ${DSYNC_HTTP_TEST_TOKEN}"}}}})});
  ProduceRaw("E1", "HTTP", R"({"space": "a b/c", "meta": {"t": 42}})");
  ASSERT_EQ(Run("E1"), Outcome::kSucceeded);
  EXPECT_EQ(EventStr("E1", "status"), "SUCCESS");
  EXPECT_EQ(Output("E1#2"), json::parse(R"({"refreshed": true, "n": 7})"));

  auto reqs = rx.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].target, "/spaces/a%20b%2Fc/refresh?tenant=42");  // placeholders percent-encoded
  EXPECT_EQ(reqs[0].Header("idempotency-key"), "E1#2");
  EXPECT_EQ(reqs[0].Header("authorization"), "Bearer s3cret-value");
  EXPECT_EQ(reqs[0].Header("content-type"), "application/json");
  json body = json::parse(reqs[0].body);
  EXPECT_EQ(body["action"], "execute");
  EXPECT_EQ(body["code"], "E1");
  EXPECT_EQ(body["step"], "notify");
  EXPECT_EQ(body["idempotency_key"], "E1#2");
  EXPECT_EQ(body["tenant_id"], "t1");
  EXPECT_EQ(body["data_id"], "d-E1");
  EXPECT_EQ(body["attempt"], 1);
  EXPECT_EQ(body["payload"]["space"], "a b/c");
  EXPECT_EQ(body["outputs"]["s0"]["ledger"], "E1#1");  // the earlier step's output
  // The secret is nowhere in the database.
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE CONCAT_WS('|', payload, output, "
                "compensation_data, error_details) LIKE '%s3cret%'"),
            0);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event WHERE CONCAT_WS('|', payload, result, last_error, "
                "process_log) LIKE '%s3cret%'"),
            0);
  EXPECT_EQ(engine_->stats().by_type.Calls("http", "execute", "ok"), 1u);
}

TEST_F(HttpStepTest, TransientWithRetryAfterThenSuccessKeepsTheKey) {
  std::atomic<int> calls{0};
  Receiver rx([&](const Receiver::Request&) {
    if (calls++ == 0) return Reply::Answer(503, "busy", {{"Retry-After", "2"}});
    return Reply::Answer(200, R"({"ok": 1})");
  });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}})});
  ProduceRaw("E2", "HTTP", "{}");
  ASSERT_EQ(Run("E2"), Outcome::kRetryScheduled);
  EXPECT_EQ(EventStr("E2", "status"), "PENDING");
  EXPECT_EQ(StepStr("E2#1", "status"), "FAILED");
  EXPECT_NE(StepStr("E2#1", "error_details").find("answered 503: busy (Retry-After 2 s)"), std::string::npos)
      << StepStr("E2#1", "error_details");
  // The backoff alone is at most 10 ms; Retry-After makes it 2 s (on the database clock).
  const int64_t delay_ms = EventInt("E2", "TIMESTAMPDIFF(MICROSECOND, modifier_time, next_run_time)") / 1000;
  EXPECT_GE(delay_ms, 1990);
  EXPECT_LE(delay_ms, 2100);
  ASSERT_EQ(RunAgain("E2"), Outcome::kSucceeded);
  auto reqs = rx.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].Header("idempotency-key"), "E2#1");
  EXPECT_EQ(reqs[1].Header("idempotency-key"), "E2#1");  // the same key on the retry
  EXPECT_EQ(json::parse(reqs[1].body)["step_retry"], 1);
  EXPECT_EQ(Output("E2#1"), json::parse(R"({"ok": 1})"));
}

TEST_F(HttpStepTest, RetryAfterIsCappedAtBackoffMax) {
  Receiver rx([](const Receiver::Request&) { return Reply::Answer(429, "", {{"Retry-After", "86400"}}); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}})});
  ProduceRaw("E3", "HTTP", "{}");
  ASSERT_EQ(Run("E3"), Outcome::kRetryScheduled);
  const int64_t delay_ms = EventInt("E3", "TIMESTAMPDIFF(MICROSECOND, modifier_time, next_run_time)") / 1000;
  EXPECT_GE(delay_ms, 4990);  // backoff_max_ms 5000
  EXPECT_LE(delay_ms, 5100);
}

TEST_F(HttpStepTest, OtherClientErrorIsPermanentWithStatusAndBody) {
  Receiver rx([](const Receiver::Request&) { return Reply::Answer(422, "space 12 does not exist"); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook?secret=1")}})});
  ProduceRaw("E4", "HTTP", "{}");
  ASSERT_EQ(Run("E4"), Outcome::kCompensated);
  EXPECT_EQ(rx.requests().size(), 1u);  // not retried
  const std::string err = StepStr("E4#1", "error_details");
  EXPECT_NE(err.find("http POST http://127.0.0.1:" + std::to_string(rx.port()) +
                     "/hook answered 422: space 12 does not exist"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("secret"), std::string::npos) << "the query is not shown";
  EXPECT_EQ(engine_->stats().by_type.Calls("http", "execute", "permanent"), 1u);
}

TEST_F(HttpStepTest, NoAnswerTimesOutAtTheDeadline) {
  Receiver rx([](const Receiver::Request&) { return Reply::InMode(Reply::Mode::kNeverAnswer); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}}, 300ms)});
  ProduceRaw("E5", "HTTP", "{}");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Run("E5"), Outcome::kRetryScheduled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  const std::string err = StepStr("E5#1", "error_details");
  EXPECT_NE(err.find("timed out after 300 ms"), std::string::npos) << err;
  EXPECT_EQ(engine_->stats().by_type.Calls("http", "execute", "timeout"), 1u);
  EXPECT_TRUE(testing::Eventually([&] { return rx.open_connections() == 0; }, 2s)) << "the connection was closed";
}

// The step's deadline is read on the engine's clock (issue 39 item 3). With a fake
// clock and a 10 s step timeout: an answer that comes when the fake clock has moved
// 9 s is the step's success; one that comes when it has moved past 10 s is discarded
// as late (a transient failure named a timeout), though no real second passed either way.
TEST_F(HttpStepTest, ALateAnswerIsLateOnTheEnginesClock) {
  std::atomic<int> advance_ms{9000};
  Receiver rx([&](const Receiver::Request&) {
    fake_.Advance(Millis(advance_ms.load()));  // the receiver "takes" this long
    return Reply::Answer(200, R"({"ok": 1})");
  });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}}, 10000ms)}, 3, &fake_);
  ProduceRaw("E20", "HTTP", "{}");
  ASSERT_EQ(Run("E20"), Outcome::kSucceeded) << StepStr("E20#1", "error_details");
  EXPECT_EQ(Output("E20#1"), json::parse(R"({"ok": 1})"));

  advance_ms = 10001;
  ProduceRaw("E21", "HTTP", "{}");
  ASSERT_EQ(Run("E21"), Outcome::kRetryScheduled);
  const std::string err = StepStr("E21#1", "error_details");
  EXPECT_NE(err.find("timed out after 10000 ms"), std::string::npos) << err;
  EXPECT_EQ(engine_->stats().by_type.Calls("http", "execute", "timeout"), 1u);
  EXPECT_EQ(rx.requests().size(), 2u);
}

// The same for a call that gets no answer: it waits while the fake clock stays short
// of the 60 s deadline (though the real wait outlasts what the fake clock shows), and
// ends as a timeout soon after the fake clock passes it, in moments of real time.
TEST_F(HttpStepTest, NoAnswerEndsWhenTheEnginesClockPassesTheDeadline) {
  Receiver rx([](const Receiver::Request&) { return Reply::InMode(Reply::Mode::kNeverAnswer); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}}, 60000ms)}, 3, &fake_);
  ProduceRaw("E22", "HTTP", "{}");
  Assign("E22");
  std::atomic<bool> done{false};
  Outcome out = Outcome::kSucceeded;
  std::thread runner([&] {
    out = engine_->Run(testing::LoadAssigned(db_.pool(), "E22"), {});
    done = true;
  });
  ASSERT_TRUE(testing::Eventually([&] { return rx.requests().size() == 1; }, 5s));
  fake_.Advance(59000ms);
  std::this_thread::sleep_for(300ms);  // the deadline timer looks at a fake clock every 20 ms
  EXPECT_FALSE(done.load()) << "the call ended before its deadline on the engine's clock";
  fake_.Advance(1000ms);
  EXPECT_TRUE(testing::Eventually([&] { return done.load(); }, 5s)) << "the call outlived its deadline";
  runner.join();
  EXPECT_EQ(out, Outcome::kRetryScheduled);
  const std::string err = StepStr("E22#1", "error_details");
  EXPECT_NE(err.find("timed out after 60000 ms"), std::string::npos) << err;
  EXPECT_EQ(engine_->stats().by_type.Calls("http", "execute", "timeout"), 1u);
}

TEST_F(HttpStepTest, ConnectionRefusedIsTransient) {
  int port;
  { Receiver gone([](const Receiver::Request&) { return Reply::Answer(200); }); port = gone.port(); }
  Plan({HttpSpec("notify", {{"url", "http://127.0.0.1:" + std::to_string(port) + "/hook"}})});
  ProduceRaw("E6", "HTTP", "{}");
  ASSERT_EQ(Run("E6"), Outcome::kRetryScheduled);
  EXPECT_NE(StepStr("E6#1", "error_details").find("cannot connect"), std::string::npos) << StepStr("E6#1", "error_details");
}

TEST_F(HttpStepTest, CompensationCallsUndoWithTheForwardOutputAndKey) {
  Receiver rx([](const Receiver::Request& r) {
    if (r.target == "/do") return Reply::Answer(200, R"({"ticket": "T-9"})");
    return Reply::Answer(200, R"({"undone": true})");
  });
  Plan({HttpSpec("notify", {{"url", rx.Url("/do")}, {"compensate", {{"url", rx.Url("/undo")}, {"method", "PUT"}}}}),
        testing::Step("s2")});
  ProduceRaw("E7", "HTTP", R"({"demo": {"fail": {"s2": "permanent"}}})");
  ASSERT_EQ(Run("E7"), Outcome::kCompensated);
  EXPECT_EQ(StepStr("E7#1", "status"), "COMPENSATED");
  auto reqs = rx.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].target, "/do");
  EXPECT_EQ(reqs[1].target, "/undo");
  EXPECT_EQ(reqs[1].method, "PUT");
  EXPECT_EQ(reqs[1].Header("idempotency-key"), "E7#1-compensate");
  json body = json::parse(reqs[1].body);
  EXPECT_EQ(body["action"], "compensate");
  EXPECT_EQ(body["forward_output"], json::parse(R"({"ticket": "T-9"})"));
}

TEST_F(HttpStepTest, HugeBodyByContentLengthIsRefusedUnread) {
  Receiver rx([](const Receiver::Request&) { return Reply::InMode(Reply::Mode::kEndless); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}}, 5000ms)});
  ProduceRaw("E8", "HTTP", "{}");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Run("E8"), Outcome::kCompensated);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  const std::string err = StepStr("E8#1", "error_details");
  EXPECT_NE(err.find("response body of 10737418240 bytes is over the limit of 1048576 bytes"), std::string::npos) << err;
}

TEST_F(HttpStepTest, EndlessChunkedBodyIsCutOffAtTheLimit) {
  Receiver rx([](const Receiver::Request&) { return Reply::InMode(Reply::Mode::kEndlessChunked); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}, {"max_response_bytes", 200000}}, 5000ms)});
  ProduceRaw("E9", "HTTP", "{}");
  ASSERT_EQ(Run("E9"), Outcome::kCompensated);
  const std::string err = StepStr("E9#1", "error_details");
  EXPECT_NE(err.find("longer than the limit of 200000 bytes (cut off)"), std::string::npos) << err;
  // What the receiver could push is bounded by the socket buffers, not 10 GB.
  EXPECT_LT(rx.endless_bytes(), 64u << 20);
}

TEST_F(HttpStepTest, SlowByteByByteAnswerEndsAtTheWholeCallDeadline) {
  Receiver rx([](const Receiver::Request&) {
    return Reply::InMode(Reply::Mode::kSlowBytes, R"({"ok": true})", 50ms);
  });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}}, 600ms)});  // each byte comes well within any per-read timeout
  ProduceRaw("E10", "HTTP", "{}");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Run("E10"), Outcome::kRetryScheduled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_NE(StepStr("E10#1", "error_details").find("timed out after 600 ms"), std::string::npos);
}

TEST_F(HttpStepTest, RedirectLoopIsBounded) {
  Receiver rx([](const Receiver::Request&) { return Reply::Answer(307, "", {{"Location", "/loop"}}); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}})});
  ProduceRaw("E11", "HTTP", "{}");
  ASSERT_EQ(Run("E11"), Outcome::kCompensated);
  EXPECT_EQ(rx.requests().size(), 6u);  // the call and 5 redirects
  EXPECT_NE(StepStr("E11#1", "error_details").find("more than 5 redirects"), std::string::npos);
}

TEST_F(HttpStepTest, RedirectToAnotherOriginIsNotFollowed) {
  Receiver other([](const Receiver::Request&) { return Reply::Answer(200); });
  Receiver rx([&](const Receiver::Request&) { return Reply::Answer(302, "", {{"Location", other.Url("/x")}}); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}})});
  ProduceRaw("E12", "HTTP", "{}");
  ASSERT_EQ(Run("E12"), Outcome::kCompensated);
  EXPECT_TRUE(other.requests().empty());
  EXPECT_NE(StepStr("E12#1", "error_details").find("another origin"), std::string::npos);
}

TEST_F(HttpStepTest, InvalidUtf8AnswerIsStoredReplaced) {
  Receiver rx([](const Receiver::Request& r) {
    if (r.target == "/text") return Reply::Answer(200, "caf\xe9 \xff\xfe ok");
    return Reply::Answer(200, "{\"name\": \"bad \xc3\x28\"}");  // JSON with an invalid sequence
  });
  Plan({HttpSpec("a", {{"url", rx.Url("/text")}}), HttpSpec("b", {{"url", rx.Url("/json")}})});
  ProduceRaw("E13", "HTTP", "{}");
  ASSERT_EQ(Run("E13"), Outcome::kSucceeded);
  EXPECT_EQ(Output("E13#1"), json("caf\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD ok"));
  EXPECT_EQ(Output("E13#2"), json("{\"name\": \"bad \xEF\xBF\xBD(\"}"));
}

TEST_F(HttpStepTest, MissingPlaceholderValueIsPermanent) {
  Receiver rx([](const Receiver::Request&) { return Reply::Answer(200); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/s/{{payload.space}}")}})});
  ProduceRaw("E14", "HTTP", R"({"other": 1})");
  ASSERT_EQ(Run("E14"), Outcome::kCompensated);
  EXPECT_TRUE(rx.requests().empty());
  EXPECT_NE(StepStr("E14#1", "error_details").find("{{payload.space}}: the payload has no space"), std::string::npos);
}

TEST_F(HttpStepTest, StoppedCallIsAbandonedQuickly) {
  Receiver rx([](const Receiver::Request&) { return Reply::InMode(Reply::Mode::kNeverAnswer); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}}, 60000ms)});
  ProduceRaw("E15", "HTTP", "{}");
  Assign("E15");
  std::stop_source stop;
  Outcome out = Outcome::kSucceeded;
  std::thread runner([&] { out = engine_->Run(testing::LoadAssigned(db_.pool(), "E15"), stop.get_token()); });
  ASSERT_TRUE(testing::Eventually([&] { return rx.requests().size() == 1; }, 5s));
  const auto t0 = std::chrono::steady_clock::now();
  stop.request_stop();
  runner.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(out, Outcome::kAbandoned);
}

TEST_F(HttpStepTest, UnsetSecretIsAPermanentFailureNamingOnlyTheVariable) {
  ::unsetenv("DSYNC_HTTP_TEST_UNSET");
  Receiver rx([](const Receiver::Request&) { return Reply::Answer(200); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}, {"headers", {{"X-Token", "${DSYNC_HTTP_TEST_UNSET}"}}}})});
  ProduceRaw("E16", "HTTP", "{}");
  ASSERT_EQ(Run("E16"), Outcome::kCompensated);
  EXPECT_TRUE(rx.requests().empty());
  EXPECT_EQ(StepStr("E16#1", "error_details"),
            "http step 'notify' header X-Token names ${DSYNC_HTTP_TEST_UNSET}, which is not set in the node's environment");
}

TEST_F(HttpStepTest, LostEventEndsTheCall) {
  Receiver rx([](const Receiver::Request&) { return Reply::InMode(Reply::Mode::kNeverAnswer); });
  Plan({HttpSpec("notify", {{"url", rx.Url("/hook")}}, 60000ms)});
  ProduceRaw("E17", "HTTP", "{}");
  Assign("E17");
  Outcome out = Outcome::kSucceeded;
  std::thread runner([&] { out = engine_->Run(testing::LoadAssigned(db_.pool(), "E17"), {}); });
  ASSERT_TRUE(testing::Eventually([&] { return rx.requests().size() == 1; }, 5s));
  // What the sweeper does to an event whose node looks dead: the fence moves on.
  Exec("UPDATE distribute_event SET status = 'PENDING', node_address = NULL, version = version + 1 WHERE code = ?", "E17");
  const auto t0 = std::chrono::steady_clock::now();
  runner.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);  // checked every 2 s
  EXPECT_EQ(out, Outcome::kLostOwnership);
  EXPECT_TRUE(testing::Eventually([&] { return rx.open_connections() == 0; }, 2s)) << "the connection was closed";
}

// ---- config ----------------------------------------------------------------------

std::string ConfigErrorOf(json params) {
  try {
    MakeHttpStep(HttpSpec("h", std::move(params)));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(HttpStepConfig, BadInputIsRefusedAtLoadWithOneLine) {
  EXPECT_EQ(ConfigErrorOf({{"url", "ftp://x/y"}}), "http step 'h' url has scheme 'ftp': only http and https are allowed");
  EXPECT_EQ(ConfigErrorOf({{"url", "http://{{payload.host}}/y"}}),
            "http step 'h' url has a placeholder outside the path and query (scheme, host and port are fixed)");
  EXPECT_EQ(ConfigErrorOf({{"url", "http://x:{{payload.p}}/y"}}),
            "http step 'h' url has a placeholder outside the path and query (scheme, host and port are fixed)");
  EXPECT_EQ(ConfigErrorOf({{"url", "http://x/{{env.HOME}}"}}), "http step 'h' url placeholder {{env.HOME}} must be {{payload.NAME}}");
  EXPECT_EQ(ConfigErrorOf({{"url", "http://x/"}, {"headers", {{"X-Id", "{{payload.id}}"}}}}),
            "http step 'h' header X-Id has a placeholder: {{payload.x}} is allowed only in the url's path and query");
  EXPECT_EQ(ConfigErrorOf({{"url", "http://x/"}, {"headers", {{"Idempotency-Key", "k"}}}}),
            "http step 'h' header Idempotency-Key is set by the step itself");
  EXPECT_EQ(ConfigErrorOf({{"url", "http://u:p@x/"}}),
            "http step 'h' url holds user info (user:password@): put credentials in a header with ${ENV_NAME}");
  EXPECT_EQ(ConfigErrorOf({{"url", "http://x/"}, {"method", "TRACE"}}),
            "http step 'h' method must be GET, POST, PUT, PATCH or DELETE, got \"TRACE\"");
  EXPECT_EQ(ConfigErrorOf({{"url", "http://x/"}, {"headers", {{"A", "${BAD-NAME}"}}}}),
            "http step 'h' header A has ${BAD-NAME} (a reference is ${NAME}: letters, digits and _)");
  EXPECT_EQ(ConfigErrorOf({{"url", "http://x/"}, {"compensate", {{"url", "gopher://x/"}}}}),
            "http step 'h' compensate.url has scheme 'gopher': only http and https are allowed");
  EXPECT_EQ(ConfigErrorOf({{"url", "http://x/"}, {"bogus", 1}}).rfind("http step 'h' has unknown key 'bogus'", 0), 0u);
  EXPECT_EQ(ConfigErrorOf({{"method", "POST"}}), "http step 'h' needs a \"url\" (http:// or https://)");
  EXPECT_EQ(ConfigErrorOf({{"url", "https://x/"}}), "(accepted)");
}

TEST(HttpStepConfig, PlaceholdersArePercentEncoded) {
  EXPECT_EQ(RenderUrl("http://x/a/{{payload.id}}?q={{payload.n}}", json{{"id", "é/?"}, {"n", true}}),
            "http://x/a/%C3%A9%2F%3F?q=true");
}

}  // namespace
}  // namespace dsync::saga
