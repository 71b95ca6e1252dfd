// Retention (events/purge.h, dispatcher/retention.h) and batch completion
// (events/batches.h, dispatcher/batch_completer.h) against a real MariaDB. Ages are
// made by moving create_time / finished_time into the past with SQL.
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "app/options.h"
#include "tests/support/fake_clock.h"

#include "core/clock.h"
#include "core/visible_text.h"
#include "dispatcher/batch_completer.h"
#include "dispatcher/retention.h"
#include "events/batches.h"
#include "events/purge.h"
#include "tests/integration/dispatcher_fixtures.h"

namespace dsync::dispatcher {
namespace {

using namespace std::chrono_literals;
using namespace fixtures;

constexpr Millis kDay{24LL * 3600 * 1000};

// An event `code` with `status`, created and finished `age_days` ago (finished_time
// NULL for a non-terminal status), and `steps` step rows.
void Seed(TestSchema& db, const std::string& code, const std::string& status, int age_days, int steps = 2,
          const std::string& batch = "") {
  const bool terminal = events::IsTerminalStatus(status);
  const std::string age = "NOW(3) - INTERVAL " + std::to_string(age_days) + " DAY";
  db.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, status, payload, create_time, "
          "finished_time, batch_code, node_address) VALUES ('t1', '" + code + "', '" + code + "', 'T', '" + status +
          "', '{\"k\": 1}', " + age + ", " + (terminal ? age : std::string("NULL")) + ", " +
          (batch.empty() ? std::string("NULL") : "'" + batch + "'") + ", " +
          (status == "RUNNING" || status == "ASSIGNED" || status == "COMPENSATING" ? "'n1:1'" : "NULL") + ")");
  for (int i = 0; i < steps; ++i) {
    db.Exec("INSERT INTO distribute_event_step (tenant_id, code, job_code, sort, step_type, step_name, status) "
            "VALUES ('t1', '" + code + "#" + std::to_string(i) + "', '" + code + "', " + std::to_string(i) +
            ", 'demo', 's" + std::to_string(i) + "', 'SUCCESS')");
  }
}

int64_t Events(TestSchema& db, const std::string& where = "1") {
  return db.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE " + where);
}
int64_t Steps(TestSchema& db, const std::string& table = "distribute_event_step") {
  return db.QueryInt("SELECT COUNT(*) FROM " + table);
}
// A checksum of everything in both live tables, to show nothing was written.
std::string Checksum(TestSchema& db) {
  return Text(db, "SELECT CONCAT((SELECT COUNT(*) FROM distribute_event), ':', "
                  "(SELECT IFNULL(SUM(CRC32(CONCAT_WS('|', id, code, status, version, modifier_time))), 0) "
                  "FROM distribute_event), ':', (SELECT COUNT(*) FROM distribute_event_step), ':', "
                  "(SELECT COUNT(*) FROM distribute_event_archive))");
}

// Old and new events of every status: only the old terminal ones may ever go.
void SeedMix(TestSchema& db) {
  for (const char* s : {"PENDING", "ASSIGNED", "RUNNING", "COMPENSATING"}) {
    Seed(db, std::string("old-") + s, s, 60);
  }
  for (int i = 0; i < 7; ++i) Seed(db, "old-ok-" + std::to_string(i), "SUCCESS", 10);
  Seed(db, "old-comp", "COMPENSATED", 10);
  Seed(db, "old-failed", "FAILED", 10);
  Seed(db, "new-ok", "SUCCESS", 0);
  Seed(db, "new-failed", "FAILED", 0);
}

events::PurgeCounts PurgeAll(TestSchema& db, bool archive, const events::PurgeSelector& selector, int batch) {
  SystemClock clock;
  events::Purger purger(archive, batch);
  return Retention::Purge(db.pool(), clock, purger, selector, Millis(0), 0, std::stop_token(), [] { return true; });
}

TEST(RetentionTest, PurgeRemovesOnlyTerminalEventsOlderThanTheBoundWithTheirSteps) {
  TestSchema db;
  SeedMix(db);
  ASSERT_EQ(Events(db), 15);

  // Batches of 3: 8 finished events go in 3 transactions.
  auto removed = PurgeAll(db, false, {{"SUCCESS", "COMPENSATED"}, kDay}, 3);
  EXPECT_EQ(removed.events, 8);
  EXPECT_EQ(removed.steps, 16);
  EXPECT_EQ(removed.batches, 3);
  EXPECT_EQ(removed.by_status["SUCCESS"], 7);
  EXPECT_EQ(removed.by_status["COMPENSATED"], 1);
  EXPECT_EQ(Events(db, "code LIKE 'old-ok-%' OR code = 'old-comp'"), 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event_step WHERE job_code LIKE 'old-ok-%' "
                        "OR job_code = 'old-comp'"),
            0);
  // FAILED was not asked for; recent and non-terminal events stay, with their steps.
  EXPECT_EQ(Events(db), 7);
  EXPECT_EQ(Events(db, "code IN ('old-PENDING', 'old-ASSIGNED', 'old-RUNNING', 'old-COMPENSATING', "
                       "'old-failed', 'new-ok', 'new-failed')"),
            7);
  EXPECT_EQ(Steps(db), 14);
  EXPECT_EQ(Steps(db, "distribute_event_archive"), 0);

  // Every terminal status with no bound to speak of: the non-terminal ones stay still.
  removed = PurgeAll(db, false, {events::TerminalStatuses(), Millis(1)}, 500);
  EXPECT_EQ(removed.events, 3);
  EXPECT_EQ(Events(db), 4);
  EXPECT_EQ(Events(db, "status IN ('PENDING', 'ASSIGNED', 'RUNNING', 'COMPENSATING')"), 4);
  EXPECT_EQ(Steps(db), 8);
}

// While the dispatcher is busy the pass pauses at least the busy pause
// (retention.busy_pause_ms) between batches (on an injected clock); idle, it pauses only
// as configured.
TEST(RetentionTest, APassPausesLongerBetweenBatchesWhileTheDispatcherIsBusy) {
  TestSchema db;
  for (int i = 0; i < 8; ++i) Seed(db, "old-" + std::to_string(i), "SUCCESS", 10);  // batches of 3, 3, 2
  FakeClock clock;
  events::Purger purger(false, 3);
  events::PurgeSelector selector{events::TerminalStatuses(), kDay};
  int asked = 0;
  events::PurgeCounts busy = Retention::Purge(db.pool(), clock, purger, selector, Millis(20), 0, std::stop_token(),
                                              [] { return true; }, [&] { return ++asked > 0; }, Millis(700));
  EXPECT_EQ(busy.events, 8);
  EXPECT_EQ(busy.batches, 3);
  EXPECT_GE(asked, 2);
  EXPECT_EQ(clock.total_slept(), 2 * Millis(700));  // between the 3 batches, none after the last

  for (int i = 0; i < 8; ++i) Seed(db, "again-" + std::to_string(i), "SUCCESS", 10);
  FakeClock idle_clock;
  events::PurgeCounts idle = Retention::Purge(db.pool(), idle_clock, purger, selector, Millis(20), 0,
                                              std::stop_token(), [] { return true; }, [] { return false; });
  EXPECT_EQ(idle.events, 8);
  EXPECT_EQ(idle_clock.total_slept(), Millis(40));
}

TEST(RetentionTest, ArchiveMovesRowsWithEveryColumnAndTheViewShowsThem) {
  TestSchema db;
  SeedMix(db);
  const std::string before = Text(db, "SELECT GROUP_CONCAT(CONCAT_WS('|', id, code, status, payload, create_time, "
                                      "finished_time, version) ORDER BY id) FROM distribute_event "
                                      "WHERE code LIKE 'old-ok-%'");
  auto moved = PurgeAll(db, true, {{"SUCCESS"}, kDay}, 2);
  EXPECT_EQ(moved.events, 7);
  EXPECT_EQ(moved.steps, 14);
  EXPECT_EQ(Events(db, "code LIKE 'old-ok-%'"), 0);
  EXPECT_EQ(Steps(db, "distribute_event_archive"), 7);
  EXPECT_EQ(Steps(db, "distribute_event_step_archive"), 14);
  EXPECT_EQ(Text(db, "SELECT GROUP_CONCAT(CONCAT_WS('|', id, code, status, payload, create_time, finished_time, "
                     "version) ORDER BY id) FROM distribute_event_archive"),
            before);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM v_events_all WHERE stored = 'archive'"), 7);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM v_events_all"), 15);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM v_steps_all WHERE stored = 'archive' AND job_code = 'old-ok-3'"), 2);

  // The same code produced again after its archive, and archived again: both rows kept.
  Seed(db, "old-ok-3", "SUCCESS", 10);
  EXPECT_EQ(PurgeAll(db, true, {{"SUCCESS"}, kDay}, 2).events, 1);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event_archive WHERE code = 'old-ok-3'"), 2);
}

TEST(RetentionTest, CountWritesNothingAndMatchesWhatAPurgeRemoves) {
  TestSchema db;
  SeedMix(db);
  const std::string before = Checksum(db);
  events::PurgeCounts counted = db.pool().Run("count", [&](storage::Connection& c) {
    return events::CountPurgeable(c, {events::TerminalStatuses(), kDay});
  });
  EXPECT_EQ(Checksum(db), before);
  EXPECT_EQ(counted.events, 9);
  EXPECT_EQ(counted.steps, 18);
  EXPECT_EQ(counted.by_status["FAILED"], 1);
  auto removed = PurgeAll(db, false, {events::TerminalStatuses(), kDay}, 4);
  EXPECT_EQ(removed.events, counted.events);
  EXPECT_EQ(removed.steps, counted.steps);
  EXPECT_EQ(removed.by_status, counted.by_status);
}

TEST(RetentionTest, AnEventRetriedOrLockedAfterTheScanIsLeftAlone) {
  TestSchema db;
  Seed(db, "a", "FAILED", 10);
  Seed(db, "b", "FAILED", 10);
  Seed(db, "c", "FAILED", 10);
  events::PurgeSelector selector{{"FAILED"}, kDay};
  events::Purger purger(false, 10);
  auto& pool = db.pool();
  events::PurgeCursor cursor = pool.Run("bound", [&](storage::Connection& c) { return purger.Begin(c, selector); });
  std::vector<int64_t> ids =
      pool.Run("scan", [&](storage::Connection& c) { return purger.NextCandidates(c, selector, cursor); });
  ASSERT_EQ(ids.size(), 3u);

  // `dsync retry` re-drives "a" between the scan and the batch; another session holds "b".
  db.Exec("UPDATE distribute_event SET status = 'PENDING', finished_time = NULL, version = version + 1 "
          "WHERE code = 'a'");
  storage::Connection holder(db.url());
  holder.Begin();
  holder.Query("SELECT id FROM distribute_event WHERE code = 'b' FOR UPDATE");

  const auto start = std::chrono::steady_clock::now();
  auto removed = pool.Transact("batch", [&](storage::Connection& c) {
    return purger.RemoveBatch(c, selector, cursor, ids);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "waited for the locked row";
  holder.Rollback();
  EXPECT_EQ(removed.events, 1);  // only "c"
  EXPECT_EQ(Events(db, "code = 'a' AND status = 'PENDING'"), 1);
  EXPECT_EQ(Events(db, "code = 'b'"), 1);
  EXPECT_EQ(Events(db, "code = 'c'"), 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event_step WHERE job_code IN ('a', 'b')"), 4);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event_step WHERE job_code = 'c'"), 0);
}

TEST(RetentionTest, APassUsesTheConfiguredBoundsPerStatus) {
  TestSchema db;
  Seed(db, "ok-3d", "SUCCESS", 3);
  Seed(db, "failed-3d", "FAILED", 3);
  Seed(db, "failed-40d", "FAILED", 40);
  RetentionSettings r;  // defaults: finished 7 days, failed 30 days
  SystemClock clock;
  Retention retention(db.pool(), clock, "kbs-sync", r);
  EXPECT_EQ(retention.RunPass(std::stop_token(), [] { return true; }).events, 1);
  EXPECT_EQ(Events(db, "code = 'failed-40d'"), 0);
  r.finished_after = 2 * kDay;
  Retention shorter(db.pool(), clock, "kbs-sync", r);
  EXPECT_EQ(shorter.RunPass(std::stop_token(), [] { return true; }).events, 1);
  EXPECT_EQ(Events(db), 1);  // failed-3d: FAILED are kept 30 days
  EXPECT_EQ(shorter.stats().events_removed, 1u);
  // A pass whose leadership is gone does nothing.
  r.failed_after = kDay;
  Retention follower(db.pool(), clock, "kbs-sync", r);
  EXPECT_EQ(follower.RunPass(std::stop_token(), [] { return false; }).events, 0);
  EXPECT_EQ(Events(db), 1);
}

TEST(RetentionTest, APassRemovesOnlyItsServicesEvents) {
  TestSchema db;
  Seed(db, "mine-40d", "FAILED", 40);
  Seed(db, "theirs-40d", "FAILED", 40);
  Seed(db, "theirs-10d", "SUCCESS", 10);
  db.Exec("UPDATE distribute_event SET service = 'billing-sync' WHERE code LIKE 'theirs-%'");
  SystemClock clock;
  Retention mine(db.pool(), clock, "kbs-sync", RetentionSettings{});
  EXPECT_EQ(mine.RunPass(std::stop_token(), [] { return true; }).events, 1);
  EXPECT_EQ(Events(db, "code = 'mine-40d'"), 0);
  EXPECT_EQ(Events(db, "service = 'billing-sync'"), 2);  // another service's leader purges those
  EXPECT_EQ(Steps(db), 4);
  events::PurgeSelector theirs{events::TerminalStatuses(), kDay, "billing-sync"};
  EXPECT_EQ(db.pool().Run("count", [&](storage::Connection& c) { return events::CountPurgeable(c, theirs); }).events, 2);
  EXPECT_EQ(PurgeAll(db, false, theirs, 10).events, 2);
  EXPECT_EQ(Events(db), 0);
}

// ---- batch completion ----------------------------------------------------------

Settings CompletionSettings() {
  Settings s = TestSettings();
  s.topics["DONE"].max_retry = 5;
  s.topics["DONE"].priority = -3;
  return s;
}

TEST(BatchCompletionTest, OneCompletionEventOnceEveryEventOfTheBatchIsTerminal) {
  TestSchema db;
  for (int i = 0; i < 5; ++i) Seed(db, "b1-" + std::to_string(i), i < 3 ? "SUCCESS" : "RUNNING", 0, 1, "b1");
  db.pool().Run("batch row", [&](storage::Connection& c) {
    events::InsertBatchCompletion(c, {"b1", "tenant-9", "DONE", R"({"report": "daily"})", std::nullopt});
    return 0;
  });
  BatchCompleter completer(db.pool(), app::BatchCompleterOptionsFrom(CompletionSettings()));
  auto report = completer.CheckOnce([] { return true; });
  EXPECT_EQ(report.open, 1u);
  EXPECT_EQ(report.completed, 0u);
  EXPECT_EQ(Events(db, "code = 'done:kbs-sync:b1'"), 0);

  db.Exec("UPDATE distribute_event SET status = 'FAILED' WHERE code = 'b1-3'");
  db.Exec("UPDATE distribute_event SET status = 'COMPENSATED' WHERE code = 'b1-4'");
  report = completer.CheckOnce([] { return true; });
  EXPECT_EQ(report.completed, 1u);
  EXPECT_EQ(Events(db, "code = 'done:kbs-sync:b1' AND topic = 'DONE' AND status = 'PENDING' AND tenant_id = 'tenant-9' "
                       "AND data_id = 'b1' AND max_retry = 5 AND priority = -3 AND batch_code IS NULL"),
            1);
  auto payload = nlohmann::json::parse(Text(db, "SELECT payload FROM distribute_event WHERE code = 'done:kbs-sync:b1'"));
  EXPECT_EQ(payload["report"], "daily");
  EXPECT_EQ(payload["batch"]["code"], "b1");
  EXPECT_EQ(payload["batch"]["total"], 5);
  EXPECT_EQ(payload["batch"]["by_status"], (nlohmann::json{{"SUCCESS", 3}, {"FAILED", 1}, {"COMPENSATED", 1}}));
  EXPECT_EQ(Text(db, "SELECT CONCAT(status, ' ', completion_code) FROM distribute_batch WHERE batch_code = 'b1'"),
            "COMPLETED done:kbs-sync:b1");

  // Checked again, by this leader or another: nothing more.
  EXPECT_EQ(completer.CheckOnce([] { return true; }).completed, 0u);
  BatchCompleter other(db.pool(), app::BatchCompleterOptionsFrom(CompletionSettings()));
  EXPECT_EQ(other.CheckOnce([] { return true; }).open, 0u);
  EXPECT_EQ(Events(db, "code LIKE 'done:%'"), 1);
}

TEST(BatchCompletionTest, AnEventHoldingTheCompletionCodeIsAConflictNotACompletion) {
  TestSchema db;
  Seed(db, "x-1", "SUCCESS", 0, 1, "bx");
  db.pool().Run("batch row", [&](storage::Connection& c) {
    events::InsertBatchCompletion(c, {"bx", "0", "DONE", "", std::nullopt});
    return 0;
  });
  // A completer's insert commits with the COMPLETED mark, so an event holding the
  // derived code while the row is still OPEN was written by a producer (plain SQL: the
  // API and the CLI refuse the prefix). Until issue 34 the check took it as its own,
  // marked the batch COMPLETED and logged BATCH_COMPLETED: the real completion event
  // was never produced. Now the batch is CONFLICT, naming the event.
  db.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) "
          "VALUES ('0', 'done:kbs-sync:bx', 'bx', 'OTHER', '{}')");
  BatchCompleter completer(db.pool(), app::BatchCompleterOptionsFrom(CompletionSettings()));
  auto report = completer.CheckOnce([] { return true; });
  EXPECT_EQ(report.completed, 0u);
  EXPECT_EQ(report.conflicts, 1u);
  EXPECT_EQ(Events(db, "code = 'done:kbs-sync:bx'"), 1);
  EXPECT_EQ(Events(db, "code = 'done:kbs-sync:bx' AND topic = 'OTHER'"), 1);  // left as the producer wrote it
  EXPECT_EQ(Text(db, "SELECT status FROM distribute_batch WHERE batch_code = 'bx'"), "CONFLICT");
  const std::string why = Text(db, "SELECT conflict FROM distribute_batch WHERE batch_code = 'bx'");
  EXPECT_NE(why.find("done:kbs-sync:bx exists but was not produced by this batch's completer (topic OTHER"),
            std::string::npos) << why;
  // Not looked at again: an operator decides (docs/event-lifecycle.md "Batches").
  EXPECT_EQ(completer.CheckOnce([] { return true; }).open, 0u);
}

TEST(BatchCompletionTest, ExpectedEventsAndHostilePayloadsFromPlainSql) {
  TestSchema db;
  Seed(db, "p-1", "SUCCESS", 0, 1, "plain");
  // A plain-SQL producer: the batch row first, expecting 2 events, the second not yet in.
  db.Exec("INSERT INTO distribute_batch (batch_code, on_complete_topic, on_complete_payload, expected_events) "
          "VALUES ('plain', 'DONE', CONCAT(REPEAT('[', 100000), REPEAT(']', 100000)), 2)");
  BatchCompleter completer(db.pool(), app::BatchCompleterOptionsFrom(CompletionSettings()));
  EXPECT_EQ(completer.CheckOnce([] { return true; }).completed, 0u);
  Seed(db, "p-2", "FAILED", 0, 1, "plain");
  EXPECT_EQ(completer.CheckOnce([] { return true; }).completed, 1u);
  auto payload = nlohmann::json::parse(Text(db, "SELECT payload FROM distribute_event WHERE code = 'done:kbs-sync:plain'"));
  EXPECT_EQ(payload["on_complete_payload_error"], "nested deeper than 64 levels");
  EXPECT_EQ(payload["batch"]["total"], 2);
}

TEST(BatchCompletionTest, CompletionCodesAreDerivedAndFit) {
  EXPECT_EQ(events::CompletionCode("kbs-sync", "b1"), "done:kbs-sync:b1");
  const std::string long_a(64, 'a');
  std::string long_b = long_a;
  long_b.back() = 'b';
  EXPECT_EQ(events::CompletionCode("s", long_a).size(), 64u);
  EXPECT_NE(events::CompletionCode("s", long_a), events::CompletionCode("s", long_b));
  EXPECT_EQ(events::CompletionCode("s", long_a), events::CompletionCode("s", long_a));
  // Scoped by service, unambiguously: the same batch code of two services, and a
  // service holding ':' (hashed, so "a:b" + "c" and "a" + "b:c" differ).
  EXPECT_NE(events::CompletionCode("s1", "b"), events::CompletionCode("s2", "b"));
  EXPECT_NE(events::CompletionCode("a:b", "c"), events::CompletionCode("a", "b:c"));
  EXPECT_EQ(events::CompletionCode("a:b", "c").rfind("done:a:b:c~", 0), 0u);
  // A long code is cut at a character boundary.
  std::string accents(39, 'x');
  for (int i = 0; i < 12; ++i) accents += "\u00e9";
  const std::string cut = events::CompletionCode("s", accents);
  EXPECT_LE(cut.size(), 64u);
  EXPECT_EQ(cut.substr(0, 46), "done:s:" + std::string(39, 'x'));
  EXPECT_FALSE(FirstInvalidUtf8(cut).has_value()) << cut;
  EXPECT_EQ(CompletionPayload("not json", "b", {{"SUCCESS", 1}})["on_complete_payload_error"], "not valid JSON");
  EXPECT_EQ(CompletionPayload("[1]", "b", {})["on_complete_payload_error"], "not a JSON object");
  EXPECT_EQ(CompletionPayload("", "b", {{"FAILED", 2}})["batch"]["total"], 2);
}

}  // namespace
}  // namespace dsync::dispatcher
