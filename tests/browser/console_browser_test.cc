// The web console in a real headless Chromium (tests/browser/chromium.h), against an
// in-process api::HttpServer and a real MariaDB schema holding a known data set: the
// overview's counts, a compensated saga drawn in order, Retry and Drain behind a
// confirmation (their effect checked in SQL), live updates over the stream, the
// sign-in form and no data without the token, and hostile strings rendered as text.
// Screenshots of every page go to DSYNC_SCREENSHOT_DIR (the build folder).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "app/options.h"
#include "tests/support/percent_encode.h"
#include <nlohmann/json.hpp>

#include "api/event_store.h"
#include "api/http_server.h"
#include "core/clock.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "tests/browser/chromium.h"
#include "tests/support/assigned_events.h"
#include "tests/support/test_db.h"
#include "tests/support/saga_fixtures.h"
#include "tests/support/engine_parts.h"

namespace dsync::api {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* kNode = "127.0.0.1:7301";
// Markup and script in every field a row can carry.
const std::string kHostileCode = "<img src=x onerror=\"window.__pwned=1\">";
const std::string kHostilePayload = "</script><script>window.__pwned=2</script>";
const std::string kHostileError = "<img src=x onerror=window.__pwned=3><b>bold</b>";

Settings BrowserSettings() {
  Settings s;
  s.service = "console-test";
  s.registry.offline_timeout = 120000ms;  // the hand-written node row stays live
  const TopicSettings defaults;
  testing::AddDemoAndOtherTopics(s, /*max_retry=*/2, defaults.backoff_base, defaults.backoff_max);
  return s;
}

// JavaScript string literal of `s`.
std::string Js(const std::string& s) { return json(s).dump(); }

std::string Encode(const std::string& s) { return testing::PercentEncode(s); }

class ConsoleBrowserTest : public ::testing::Test {
 protected:
  ConsoleBrowserTest()
      : settings_(BrowserSettings()),
        store_(std::make_unique<EventStore>(db_.pool(), app::StoreOptionsFrom(settings_))),
        parts_(db_.pool(), settings_, kNode) {
    const char* dir = std::getenv("DSYNC_SCREENSHOT_DIR");
    shots_ = dir && *dir ? dir : std::filesystem::current_path().string() + "/console-screenshots";
    std::filesystem::create_directories(shots_);
  }

  std::unique_ptr<HttpServer> Serve(const std::string& token) {
    HttpOptions o;
    o.listen = "127.0.0.1:0";
    o.connection.threads = 8;
    o.token = token;
    o.stream_poll_interval = 50ms;
    auto server = std::make_unique<HttpServer>(*store_, o, clock_);
    server->Start();
    return server;
  }

  void Produce(const std::string& code, const std::string& topic, json payload = json::object(),
               const std::string& tenant = "t1") {
    NewEvent e;
    e.code = code;
    e.topic = topic;
    e.tenant_id = tenant;
    e.data_id = "d1";
    e.payload = std::move(payload);
    ASSERT_TRUE(store_->Produce(e).created) << code;
  }

  // The dispatcher's assignment by hand, then the in-process engine runs the event.
  saga::Outcome Run(const std::string& code) {
    db_.pool().Run("assign", [&](storage::Connection& c) {
      return c.Execute("UPDATE distribute_event SET status = 'ASSIGNED', node_address = ?, version = version + 1, "
                       "assigned_time = NOW(3) WHERE code = ? AND status = 'PENDING'",
                       kNode, code);
    });
    for (const auto& e : testing::PollAssigned(db_.pool(), kNode, settings_.service)) {
      if (e.code != code) continue;
      saga::Outcome o = engine_.Run(e, {});
      return o;
    }
    ADD_FAILURE() << code << " was not assigned";
    return saga::Outcome::kFailed;
  }

  std::string Sql(const std::string& query) {
    return db_.pool().Run("read", [&](storage::Connection& c) { return c.QueryString(query).value_or("NULL"); });
  }
  bool WaitSql(const std::string& query, const std::string& expected) {
    for (int i = 0; i < 100; ++i) {
      if (Sql(query) == expected) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  // The data set every check below counts on:
  //   SUCCESS ok-1, ok-2; COMPENSATED comp-1 (s3 fails permanently: s2, s1 undone);
  //   FAILED the hostile event; PENDING p-1, p-2 (OTHER) and batch-A's three events.
  void Seed() {
    Produce("ok-1", "DEMO");
    Produce("ok-2", "DEMO");
    Produce("comp-1", "DEMO", {{"demo", {{"fail", {{"s3", "permanent"}}}}}});
    Produce(kHostileCode, "DEMO", {{"note", kHostilePayload}});
    Produce("p-1", "OTHER");
    Produce("p-2", "OTHER", json::object(), "t2");
    std::vector<NewEvent> batch;
    for (int i = 1; i <= 3; ++i) {
      NewEvent e;
      e.code = "ba-" + std::to_string(i);
      e.topic = "OTHER";
      e.tenant_id = "t1";
      e.data_id = "d1";
      batch.push_back(e);
    }
    ASSERT_EQ(store_->ProduceBatch("batch-A", batch).created, 3);
    ASSERT_EQ(Run("ok-1"), saga::Outcome::kSucceeded);
    ASSERT_EQ(Run("ok-2"), saga::Outcome::kSucceeded);
    ASSERT_EQ(Run("comp-1"), saga::Outcome::kCompensated);
    ASSERT_EQ(Run("ba-1"), saga::Outcome::kSucceeded);
    db_.pool().Run("hostile", [&](storage::Connection& c) {
      return c.Execute("UPDATE distribute_event SET status = 'FAILED', last_error = ? WHERE code = ?", kHostileError,
                       kHostileCode);
    });
    db_.Exec("INSERT INTO distribute_node_registry (service_name, node_address, status, last_heartbeat_time, metadata) "
             "VALUES ('console-test', '127.0.0.1:7301', 1, NOW(3), "
             "'{\"capacity\": 4, \"processing_count\": 1, \"load\": 0.25, \"topics\": [\"DEMO\", \"OTHER\"]}')");
  }

  // Seeds the data set and serves it (for the rest of the test) with API token `token`
  // ("" for none); returns the console's address.
  std::string SeedAndServe(const std::string& token) {
    Seed();
    server_ = Serve(token);
    return "http://127.0.0.1:" + std::to_string(server_->port()) + "/";
  }

  void Shot(testing::Chromium& b, const std::string& name) {
    // A stray null/undefined rendered as text is a bug of the page.
    EXPECT_EQ(b.Eval("(() => { const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT); let n = 0;"
                     " while (w.nextNode()) if (/^(null|undefined|NaN)$/.test(w.currentNode.textContent.trim())) n++;"
                     " return n; })()"),
              0)
        << name;
    b.Screenshot(shots_ + "/" + name + ".png");
    EXPECT_GT(std::filesystem::file_size(shots_ + "/" + name + ".png"), 5000u) << name;
  }

  // Nothing the data set holds ran as script, and no markup from it became an element.
  void ExpectNoInjection(testing::Chromium& b, const std::string& where) {
    EXPECT_EQ(b.Eval("typeof window.__pwned"), "undefined") << where << ": a hostile string ran";
    EXPECT_EQ(b.Eval("document.querySelectorAll('img, b, main script').length"), 0) << where;
  }

  testing::TestSchema db_;
  Settings settings_;
  std::unique_ptr<EventStore> store_;  // the settings' options when built (a test may build it again)
  testing::EngineParts parts_;  // the in-process engine that runs the produced events
  SystemClock& clock_ = parts_.clock;
  saga::SagaEngine& engine_ = parts_.engine;
  std::string shots_;
  std::unique_ptr<HttpServer> server_;  // SeedAndServe's; stopped before the store goes
};

TEST_F(ConsoleBrowserTest, PagesShowTheDataSetAndActionsAskFirst) {
  const std::string base = SeedAndServe("");
  testing::Chromium b;

  // --- overview: the counts of the data set -----------------------------------------
  b.Navigate(base + "#/overview");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'overview'")) << b.Eval("document.body.innerText");
  auto count = [&](const std::string& status) {
    return b.Eval("document.querySelector('[data-count-status=" + status + "]').textContent");
  };
  EXPECT_EQ(count("SUCCESS"), "3");
  EXPECT_EQ(count("COMPENSATED"), "1");
  EXPECT_EQ(count("FAILED"), "1");
  EXPECT_EQ(count("PENDING"), "4");
  EXPECT_EQ(count("RUNNING"), "0");
  EXPECT_EQ(b.Eval("document.querySelector('[data-count-total]').textContent"), "9");
  ASSERT_TRUE(b.WaitFor("document.querySelector('tr[data-topic=OTHER] td[data-status=PENDING]')"));
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-topic=OTHER] td[data-status=PENDING]').textContent"), "4");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-topic=DEMO] td[data-status=COMPENSATED]').textContent"), "1");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-attention=failed] td.code').textContent"), kHostileCode);
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-attention=failed] td.err').textContent"), kHostileError);
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-node] th').textContent"), kNode);
  ExpectNoInjection(b, "overview");
  std::cout << "overview first render in the browser: " << b.Eval("document.body.dataset.overviewMs").dump()
            << " ms\n";
  Shot(b, "overview");

  // --- events: newest first, filters --------------------------------------------------
  b.Navigate(base + "#/events");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'events'"));
  EXPECT_EQ(b.Eval("[...document.querySelectorAll('tr[data-code]')].map(r => r.dataset.code)"),
            json({"ba-3", "ba-2", "ba-1", "p-2", "p-1", kHostileCode, "comp-1", "ok-2", "ok-1"}));
  ExpectNoInjection(b, "events");
  Shot(b, "events");
  b.Navigate(base + "#/events?status=PENDING&tenant=t1&code=ba-");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'events' && document.querySelector('#f-tenant').value === 't1'"));
  EXPECT_EQ(b.Eval("[...document.querySelectorAll('tr[data-code]')].map(r => r.dataset.code)"), json({"ba-3", "ba-2"}));

  // --- one event: the compensated saga, in order ---------------------------------------
  b.Navigate(base + "#/event/comp-1");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'event' && document.querySelector('svg.saga')"));
  EXPECT_EQ(b.Eval("[...document.querySelectorAll('svg.saga [data-lane=forward]')].map(g => g.dataset.step)"),
            json({"s1", "s2", "s3"}));
  EXPECT_EQ(b.Eval("[...document.querySelectorAll('svg.saga [data-lane=compensate]')].map(g => g.dataset.step)"),
            json({"1. s2", "2. s1"}))
      << "compensations below, in the order they ran: the reverse";
  EXPECT_EQ(b.Eval("document.querySelector('svg.saga [data-lane=forward][data-step=s3]').classList.contains('failed')"),
            true);
  EXPECT_EQ(b.Eval("[...document.querySelectorAll('svg.saga [data-lane=compensate]')]"
                   ".every(g => g.classList.contains('st-COMPENSATED'))"),
            true);
  // The compensation of s2 is drawn under s2, right of s1's.
  EXPECT_EQ(b.Eval("(() => { const [a, b] = document.querySelectorAll('svg.saga [data-lane=compensate]');"
                   " return a.transform.baseVal[0].matrix.e > b.transform.baseVal[0].matrix.e; })()"),
            true);
  EXPECT_EQ(b.Eval("document.querySelectorAll('tr[data-step-row]').length"), 3);
  Shot(b, "event");

  // --- Retry: asks first; Cancel changes nothing; Confirm re-drives it --------------------
  const std::string status_sql = "SELECT status FROM distribute_event WHERE code = 'comp-1'";
  b.Eval("document.getElementById('retry-failed').click()");
  ASSERT_TRUE(b.WaitFor("document.getElementById('confirm').open"));
  EXPECT_EQ(b.Eval("document.getElementById('confirm-title').textContent"), "Retry this event?");
  Shot(b, "event-retry-confirm");
  b.Eval("document.getElementById('confirm-cancel').click()");
  ASSERT_TRUE(b.WaitFor("!document.getElementById('confirm').open"));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Sql(status_sql), "COMPENSATED") << "cancelled: nothing written";
  b.Eval("document.getElementById('retry-failed').click()");
  ASSERT_TRUE(b.WaitFor("document.getElementById('confirm').open"));
  b.Eval("document.getElementById('confirm-ok').click()");
  EXPECT_TRUE(WaitSql(status_sql, "PENDING"));
  EXPECT_EQ(Sql("SELECT JSON_UNQUOTE(JSON_EXTRACT(process_log, '$[last].why')) FROM distribute_event "
                "WHERE code = 'comp-1'"),
            "operator retry from the failed step");
  // Live: the page follows the event's stream while it runs again (and compensates again).
  ASSERT_TRUE(b.WaitFor("document.querySelector('dl.fields .badge').textContent === 'PENDING'"));
  ASSERT_EQ(Run("comp-1"), saga::Outcome::kCompensated);
  EXPECT_TRUE(b.WaitFor("document.querySelector('dl.fields .badge').textContent === 'COMPENSATED'"))
      << "the page did not follow the stream";

  // --- hostile strings render as text -------------------------------------------------
  b.Navigate(base + "#/event/" + Encode(kHostileCode));
  ASSERT_TRUE(b.WaitFor("document.getElementById('event-code')?.textContent === " + Js(kHostileCode)));
  EXPECT_EQ(b.Eval("document.getElementById('event-code').textContent"), kHostileCode);
  EXPECT_EQ(b.Eval("document.getElementById('last-error').textContent"), kHostileError);
  EXPECT_EQ(b.Eval("[...document.querySelectorAll('pre.data')].some(p => p.textContent.includes(" +
                   Js(kHostilePayload) + "))"),
            true);
  ExpectNoInjection(b, "hostile event page");
  Shot(b, "event-hostile");

  // --- nodes: Drain asks first -----------------------------------------------------------
  const std::string node_sql = "SELECT status FROM distribute_node_registry WHERE node_address = '127.0.0.1:7301'";
  b.Navigate(base + "#/nodes");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'nodes' && document.querySelector('[data-drain]')"));
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-node] td:nth-child(7)').textContent"), "DEMO, OTHER");
  b.Eval("document.querySelector('[data-drain=\"127.0.0.1:7301\"]').click()");
  ASSERT_TRUE(b.WaitFor("document.getElementById('confirm').open"));
  EXPECT_EQ(b.Eval("document.getElementById('confirm-title').textContent"), "Drain this node?");
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Sql(node_sql), "1") << "nothing before confirming";
  b.Eval("document.getElementById('confirm-ok').click()");
  EXPECT_TRUE(WaitSql(node_sql, "2"));
  EXPECT_TRUE(b.WaitFor("document.querySelector('tr[data-node] .badge').textContent === 'draining'", 6000ms));
  Shot(b, "nodes");

  // --- batches: progress by status, live ---------------------------------------------------
  b.Navigate(base + "#/batches?code=batch-A");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'batches' && document.querySelector('[data-percent]')"));
  EXPECT_EQ(b.Eval("document.querySelector('[data-batch-status=SUCCESS]').textContent"), "1");
  EXPECT_EQ(b.Eval("document.querySelector('[data-batch-status=PENDING]').textContent"), "2");
  EXPECT_EQ(b.Eval("document.querySelector('[data-percent]').textContent"), "33.3 %");
  ASSERT_EQ(Run("ba-2"), saga::Outcome::kSucceeded);
  EXPECT_TRUE(b.WaitFor("document.querySelector('[data-percent]').textContent === '66.7 %'"));
  Shot(b, "batches");

  // --- verify: the latest result per subject, from the history table (V013) ---------------
  b.Navigate(base + "#/verify");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'verify'"));
  EXPECT_NE(b.Eval("document.getElementById('verify-empty').textContent").get<std::string>().find("dsync verify"),
            std::string::npos);
  db_.Exec("INSERT INTO dsync_verify_result (run_id, subject_kind, subject, filter_text, step_name, table_name, "
           "source_ds, target_ds, is_equal, source_rows, target_rows, missing_in_target, extra_in_target, different, "
           "chunks, chunks_differing, first_keys, finished_at) VALUES "
           "('r1', 'topic', 'SPACE_ADD', '{\\\"space_id\\\":13}', 'docs', 'kb_doc', 'env_a', 'env_b', 0, 10, 9, 1, 0, 2, 3, 1, "
           "'{\\\"missing_in_target\\\":[[1307]],\\\"extra_in_target\\\":[],\\\"different\\\":[[1301],[1302]]}', UTC_TIMESTAMP(3)), "
           "('r2', 'table', 'kb_tag', 'space_id <> 13 {}', NULL, 'kb_tag', 'env_a', 'env_b', 1, 50, 50, 0, 0, 0, 1, 0, "
           "'{}', UTC_TIMESTAMP(3))");
  ASSERT_TRUE(b.WaitFor("document.querySelectorAll('#verify-results tr[data-verify-subject]').length === 2"));
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-verify-subject=SPACE_ADD]').dataset.verifyEqual"), "false");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-verify-subject=kb_tag]').dataset.verifyEqual"), "true");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-verify-subject=SPACE_ADD] [data-verify-keys]').textContent"),
            "missing: [1307]; different: [1301] [1302]");
  Shot(b, "verify");

  EXPECT_TRUE(b.errors().empty()) << b.errors().front();
}

TEST_F(ConsoleBrowserTest, WithATokenThePageShowsTheSignInAndNoData) {
  const std::string base = SeedAndServe("tok-Secret-1");
  testing::Chromium b;
  b.Navigate(base + "#/overview");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'login'")) << b.Eval("document.body.innerText");
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(b.Eval("document.body.dataset.view"), "login");
  EXPECT_EQ(b.Eval("document.querySelectorAll('[data-count-status], tr[data-code], tr[data-node]').length"), 0);
  const std::string text = b.Eval("document.body.innerText");
  for (const char* data : {"ok-1", "comp-1", "127.0.0.1:7301", "batch-A"}) {
    EXPECT_EQ(text.find(data), std::string::npos) << data << " shown without the token";
  }
  EXPECT_EQ(b.Eval("document.querySelector('label[for=token]').textContent"), "API token");
  Shot(b, "login");

  // A wrong token is refused; the right one opens the overview.
  b.Eval("document.getElementById('token').value = 'wrong'; document.querySelector('form.login button').click()");
  ASSERT_TRUE(b.WaitFor("document.querySelector('form.login .error').textContent.includes('not accepted')"));
  b.Eval("document.getElementById('token').value = 'tok-Secret-1'; document.querySelector('form.login button').click()");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'overview'"));
  EXPECT_EQ(b.Eval("document.querySelector('[data-count-status=SUCCESS]').textContent"), "3");
  EXPECT_EQ(b.Eval("sessionStorage.getItem('dsync.console.token')"), "tok-Secret-1");
  ExpectNoInjection(b, "overview with token");
}

// No silent waits (issue 34): an event held behind a blocker of a topic no config
// knows is listed on the overview with the blocker (a link, its code rendered as text)
// and the blocker's reason; the event page's Cancel asks first, then ends the blocker,
// and the held event leaves the list.
TEST_F(ConsoleBrowserTest, HeldEventsShowTheirBlockerAndCancelEndsTheBlocker) {
  const std::string blocker = "<b>ghost</b>";
  db_.pool().Run("seed", [&](storage::Connection& c) {
    c.Execute("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, service) "
              "VALUES ('t9', ?, 'd9', 'GHOST', '{}', 'console-test'), ('t9', 'held-1', 'd9', 'DEMO', '{}', 'console-test')",
              blocker);
    // What the leader records (dispatcher/dispatch_cycle.h), and its live lease.
    c.Execute("INSERT INTO distribute_unroutable_topic (topic, service_name, reason, kind, since_time, updated_time) "
              "VALUES ('GHOST', 'console-test', 'no config of the leading dispatcher defines topic GHOST and no live "
              "node serves it', 'unknown_topic', NOW(3), NOW(3) + INTERVAL 1 HOUR)");
    c.Execute("INSERT INTO distribute_lease_lock (lock_name, owner, token, expires_at) "
              "VALUES ('dispatcher:console-test', 'someone:1:x', 1, NOW(3) + INTERVAL 1 HOUR)");
  });
  server_ = Serve("");
  const std::string base = "http://127.0.0.1:" + std::to_string(server_->port()) + "/";
  testing::Chromium b;
  b.Navigate(base + "#/overview");
  ASSERT_TRUE(b.WaitFor("document.querySelector('tr[data-attention=held_behind]')")) << b.Eval("document.body.innerText");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-attention=held_behind]').dataset.code"), "held-1");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-attention=held_behind] td[data-why] a').textContent"), blocker);
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-attention=held_behind] td[data-why]').textContent"),
            "held behind " + blocker +
                " (unknown_topic: no config of the leading dispatcher defines topic GHOST and no live node serves it)");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-attention=unknown_topic]').dataset.code"), blocker);
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-attention=held_behind] td:nth-child(5)').textContent"), "t9/d9");
  ExpectNoInjection(b, "overview with a held event");
  Shot(b, "overview-held");

  // The blocker's page: Cancel asks first; dismissed, nothing changes; confirmed, it ends.
  b.Eval("document.querySelector('tr[data-attention=held_behind] td[data-why] a').click()");
  ASSERT_TRUE(b.WaitFor("document.getElementById('event-code')?.textContent === " + Js(blocker)));
  ASSERT_TRUE(b.WaitFor("document.getElementById('cancel-event') && !document.getElementById('cancel-event').disabled"));
  b.Eval("document.getElementById('cancel-event').click()");
  ASSERT_TRUE(b.WaitFor("document.getElementById('confirm').open"));
  EXPECT_EQ(b.Eval("document.getElementById('confirm-title').textContent"), "Cancel this event?");
  b.Eval("document.getElementById('confirm-cancel').click()");
  ASSERT_TRUE(b.WaitFor("!document.getElementById('confirm').open"));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Sql("SELECT status FROM distribute_event WHERE code = 'held-1'"), "PENDING");
  EXPECT_EQ(Sql("SELECT status FROM distribute_event WHERE topic = 'GHOST'"), "PENDING") << "dismissed: nothing written";
  b.Eval("document.getElementById('cancel-event').click()");
  ASSERT_TRUE(b.WaitFor("document.getElementById('confirm').open"));
  b.Eval("document.getElementById('confirm-ok').click()");
  EXPECT_TRUE(WaitSql("SELECT CONCAT(status, ' ', last_error) FROM distribute_event WHERE topic = 'GHOST'",
                      "FAILED cancelled: cancelled from the console"));
  EXPECT_TRUE(b.WaitFor("document.getElementById('cancel-event').disabled"));
  ExpectNoInjection(b, "blocker page");
  Shot(b, "event-cancelled");

  // Back on the overview, held-1 is no longer held (it is due; a dispatcher would run it).
  b.Navigate(base + "#/overview");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'overview' && document.querySelector('tr[data-attention=failed]')"));
  EXPECT_EQ(b.Eval("document.querySelectorAll('tr[data-attention=held_behind]').length"), 0);
  EXPECT_TRUE(b.errors().empty()) << b.errors().front();
}

// issue 37: the Topics page lists topics with their pause and the schedules; Pause and
// Resume ask first and write the pause row (with the reason typed, by "console").
TEST_F(ConsoleBrowserTest, TopicsPagePausesAndResumesAfterConfirmation) {
  ScheduleSettings nightly;
  nightly.cron = "0 3 * * *";
  nightly.topic = "OTHER";
  settings_.schedules["nightly"] = nightly;
  store_ = std::make_unique<EventStore>(db_.pool(), app::StoreOptionsFrom(settings_));  // the server's ControlStore reads them
  Produce("p-1", "OTHER");
  server_ = Serve("");
  const std::string base = "http://127.0.0.1:" + std::to_string(server_->port()) + "/";
  testing::Chromium b;
  b.Navigate(base + "#/topics");
  ASSERT_TRUE(b.WaitFor("document.querySelector('tr[data-topic=OTHER]')")) << b.Eval("document.body.innerText");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-topic=OTHER]').dataset.paused"), "false");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-topic=OTHER] td:nth-child(3)').textContent"), "1");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-schedule=nightly] td:nth-child(2)').textContent"), "0 3 * * *");
  EXPECT_TRUE(b.Eval("document.querySelector('tr[data-schedule=nightly] td:nth-child(5)').textContent")
                  .get<std::string>()
                  .ends_with("T03:00:00.000Z (computed)"));

  b.Eval("document.getElementById('pause-reason').value = " + Js("<b>nightly</b> maintenance"));
  b.Eval("document.querySelector('tr[data-topic=OTHER] button[data-topic-action=pause]').click()");
  ASSERT_TRUE(b.WaitFor("document.getElementById('confirm').open"));
  EXPECT_EQ(b.Eval("document.getElementById('confirm-title').textContent"), "Pause this topic?");
  b.Eval("document.getElementById('confirm-cancel').click()");
  ASSERT_TRUE(b.WaitFor("!document.getElementById('confirm').open"));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Sql("SELECT COUNT(*) FROM dsync_topic_pause"), "0") << "dismissed: nothing written";
  b.Eval("document.querySelector('tr[data-topic=OTHER] button[data-topic-action=pause]').click()");
  ASSERT_TRUE(b.WaitFor("document.getElementById('confirm').open"));
  b.Eval("document.getElementById('confirm-ok').click()");
  EXPECT_TRUE(WaitSql("SELECT CONCAT(topic, '|', paused_by, '|', reason) FROM dsync_topic_pause WHERE service = 'console-test'",
                      "OTHER|console|<b>nightly</b> maintenance"));
  ASSERT_TRUE(b.WaitFor("document.querySelector('tr[data-topic=OTHER]').dataset.paused === 'true'"));
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-topic=OTHER] td:nth-child(5)').textContent"), "console");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-topic=OTHER] td:nth-child(7)').textContent"),
            "<b>nightly</b> maintenance");
  ExpectNoInjection(b, "topics page");
  Shot(b, "topics-paused");

  b.Eval("document.querySelector('tr[data-topic=OTHER] button[data-topic-action=resume]').click()");
  ASSERT_TRUE(b.WaitFor("document.getElementById('confirm').open"));
  EXPECT_EQ(b.Eval("document.getElementById('confirm-title').textContent"), "Resume this topic?");
  b.Eval("document.getElementById('confirm-ok').click()");
  EXPECT_TRUE(WaitSql("SELECT COUNT(*) FROM dsync_topic_pause", "0"));
  ASSERT_TRUE(b.WaitFor("document.querySelector('tr[data-topic=OTHER]').dataset.paused === 'false'"));
  EXPECT_TRUE(b.errors().empty()) << b.errors().front();
}

// issue 36: the Captures page lists each capture of the service (GET /v1/captures) with
// its state, position, counts and reader, its paused tables with what to run, and its
// last error; hostile text in them stays text.
TEST_F(ConsoleBrowserTest, CapturesPageListsCapturesWithPausedTablesAndErrors) {
  db_.pool().Run("captures", [&](storage::Connection& c) {
    c.Execute("INSERT INTO dsync_capture (service, name, source_ds, target_ds, state, gtid, holder, lease_until, "
              "paused_tables, row_changes) VALUES (?, 'orders', 'env_a', 'env_b', 'RUNNING', '0-11-42', 'host:123:abc', "
              "NOW(3) + INTERVAL 60 SECOND, ?, 1234)",
              settings_.service, std::string(R"({"order_line": "DDL on order_line: <img src=x onerror=\"window.__pwned=1\">"})"));
    c.Execute("INSERT INTO dsync_capture (service, name, source_ds, target_ds, state, last_error) "
              "VALUES (?, 'billing', 'env_a', 'env_b', 'FAILED', '<b>boom</b>')",
              settings_.service);
  });
  server_ = Serve("");
  const std::string base = "http://127.0.0.1:" + std::to_string(server_->port()) + "/";
  testing::Chromium b;
  b.Navigate(base + "#/captures");
  ASSERT_TRUE(b.WaitFor("document.body.dataset.view === 'captures' && document.querySelector('tr[data-capture=orders]')"))
      << b.Eval("document.body.innerText");
  EXPECT_EQ(b.Eval("document.querySelector('a[data-nav=captures]').getAttribute('aria-current')"), "page");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-capture=orders] td:nth-child(2)').textContent"), "env_a → env_b");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-capture=orders] td:nth-child(3)').textContent"), "RUNNING, 1 paused");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-capture=orders] td:nth-child(4)').textContent"), "0-11-42");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-capture=orders] td:nth-child(6)').textContent"), "— / —");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-capture=orders] td:nth-child(8)').textContent"), "1,234");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-capture=orders] td:nth-child(11)').textContent"), "host:123:abc");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-capture=billing]').dataset.state"), "FAILED");
  EXPECT_EQ(b.Eval("document.querySelector('tr[data-capture=billing] td:nth-child(11)').textContent"), "none");
  EXPECT_EQ(b.Eval("document.querySelector('li[data-paused=\"orders:order_line\"]').textContent"),
            "orders: table order_line paused: DDL on order_line: <img src=x onerror=\"window.__pwned=1\"> — align the "
            "target, then run dsync capture resume orders");
  EXPECT_EQ(b.Eval("document.querySelector('li[data-error=billing]').textContent"),
            "billing: last error: <b>boom</b> — fix it, then run dsync capture resume billing");
  ExpectNoInjection(b, "captures page");
  Shot(b, "captures");
  EXPECT_TRUE(b.errors().empty()) << b.errors().front();
}

}  // namespace
}  // namespace dsync::api
