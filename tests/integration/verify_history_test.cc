// The verify history (dsync_verify_result, V013) against a real MariaDB: retention
// keeps it bounded like finished events (retention.verify_results_after_ms), and what
// /metrics, GET /v1/verify and the console read of it (api::ReadLatestVerify) is a
// bounded range of the newest rows, not a scan of every row.
#include <string>

#include <gtest/gtest.h>

#include "api/verify_service.h"
#include "core/clock.h"
#include "dispatcher/retention.h"
#include "tests/support/test_db.h"

namespace dsync {
namespace {

using testing::TestSchema;

constexpr Millis kDay{24LL * 3600 * 1000};

// `n` results of `subject` (filter `filter`) that finished `age_hours` ago.
void SeedResults(TestSchema& db, const std::string& subject, int n, int age_hours, const std::string& filter = "{}") {
  db.Exec("INSERT INTO dsync_verify_result (run_id, subject_kind, subject, filter_text, table_name, source_ds, "
          "target_ds, is_equal, source_rows, target_rows, missing_in_target, extra_in_target, different, chunks, "
          "chunks_differing, finished_at) SELECT CONCAT('run-', seq), 'topic', '" + subject + "', '" + filter +
          "', 'doc', 'env_a', 'env_b', 1, 1, 1, 0, 0, 0, 1, 0, UTC_TIMESTAMP(3) - INTERVAL " +
          std::to_string(age_hours) + " HOUR FROM seq_1_to_" + std::to_string(n));
}

int64_t Results(TestSchema& db, const std::string& where = "1") {
  return db.QueryInt("SELECT COUNT(*) FROM dsync_verify_result WHERE " + where);
}

TEST(VerifyHistoryTest, RetentionRemovesResultsOlderThanTheBound) {
  TestSchema db;
  SeedResults(db, "OLD", 5, 10 * 24);
  SeedResults(db, "NEW", 3, 1);
  RetentionSettings r;  // verify results: 7 days, like finished events
  EXPECT_EQ(r.verify_results_after, r.finished_after);
  r.batch_size = 2;     // 3 statements for the 5 old rows
  r.batch_pause = Millis(0);
  SystemClock clock;
  dispatcher::Retention retention(db.pool(), clock, "kbs-sync", r);
  retention.RunPass(std::stop_token(), [] { return true; });
  EXPECT_EQ(Results(db, "subject = 'OLD'"), 0);
  EXPECT_EQ(Results(db, "subject = 'NEW'"), 3);
  EXPECT_EQ(retention.stats().verify_results_removed, 5u);
  // A pass whose leadership is gone removes nothing; a shorter bound removes the rest.
  r.verify_results_after = Millis(30 * 60 * 1000);
  dispatcher::Retention follower(db.pool(), clock, "kbs-sync", r);
  follower.RunPass(std::stop_token(), [] { return false; });
  EXPECT_EQ(Results(db), 3);
  dispatcher::Retention shorter(db.pool(), clock, "kbs-sync", r);
  shorter.RunPass(std::stop_token(), [] { return true; });
  EXPECT_EQ(Results(db), 0);
}

// The latest result per (subject, filter, table, target) comes from the newest
// kLatestScanRows rows only: a subject whose latest run lies further back is not
// listed (the old view ranked every row of the history on each scrape).
TEST(VerifyHistoryTest, LatestResultsReadABoundedRangeOfTheNewestRows) {
  TestSchema db;
  SeedResults(db, "BURIED", 1, 5);
  SeedResults(db, "BUSY", api::kLatestScanRows - 1, 2);
  SeedResults(db, "BUSY", 1, 1, R"({"g":2})");
  db.Exec("UPDATE dsync_verify_result SET is_equal = 0, different = 4 WHERE id = (SELECT m FROM "
          "(SELECT MAX(id) AS m FROM dsync_verify_result WHERE subject = 'BUSY' AND filter_text = '{}') x)");
  auto latest = api::ReadLatestVerify(db.pool());
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_EQ(latest[0].subject, "BUSY");
  EXPECT_EQ(latest[0].filter, R"({"g":2})");
  EXPECT_EQ(latest[1].filter, "{}");
  EXPECT_FALSE(latest[1].equal);  // the newest row of that filter
  EXPECT_EQ(latest[1].differences, 4);
  EXPECT_GT(latest[1].age_seconds, 3600);
  EXPECT_EQ(api::ReadLatestVerify(db.pool(), 1).size(), 1u);
  // Once retention has removed the busy subject's older rows, the buried one shows.
  db.Exec("DELETE FROM dsync_verify_result WHERE subject = 'BUSY' AND finished_at < UTC_TIMESTAMP(3) - INTERVAL 90 MINUTE");
  latest = api::ReadLatestVerify(db.pool());
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_EQ(latest[1].subject, "BURIED");
}

}  // namespace
}  // namespace dsync
