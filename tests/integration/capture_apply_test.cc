// The capture_sync step's keyed apply (table::RunKeyedSync through
// saga/steps/capture_step.h) against a real MariaDB: two fresh schemas as the capture's
// source and target. What a keyed table_sync of the same keys did must still hold: the
// target's rows of the keys equal the source's rows that match the filter, a key the
// source lost is deleted where the target's row matches the filter, nothing else is
// touched, the chunk record restores the target byte for byte, a re-run converges, a
// superseded claim writes nothing; and the node's description of a table is taken again
// for the events of a later copy.
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "config/captures.h"
#include "core/clock.h"
#include "core/error.h"
#include "saga/step_handler.h"
#include "saga/steps/capture_step.h"
#include "tests/support/test_db.h"

namespace dsync::saga {
namespace {

using nlohmann::json;
using testing::TestSchema;

class Ctx : public StepContext {
 public:
  Ctx(Datasources& ds, json payload, std::string key) : ds_(ds), payload_(std::move(payload)), key_(std::move(key)) {}
  const std::string& event_code() const override { return key_; }
  const std::string& step_name() const override { return step_; }
  const std::string& idempotency_key() const override { return key_; }
  const json& payload() const override { return payload_; }
  int attempt() const override { return attempt_no; }
  int step_retry_count() const override { return 0; }
  const json& compensation_data() const override { return compensation; }
  std::chrono::steady_clock::time_point deadline() const override { return deadline_; }
  Clock& clock() override { return clock_; }
  std::stop_token stop_token() const override { return stop.get_token(); }
  storage::Connection& tx() override { throw std::logic_error("capture steps must not use the framework tx"); }
  bool StillOwner() override { return true; }
  void ReportProgress(const json&) override {}
  Datasources& datasources() override { return ds_; }

  json compensation = nullptr;
  int attempt_no = 1;
  std::stop_source stop;

 private:
  Datasources& ds_;
  json payload_;
  std::string key_;
  std::string step_ = "apply";
  SystemClock clock_;  // a step's time is the process's here
  const Clock::TimePoint deadline_ = clock_.Now() + std::chrono::hours(1);
};

class CaptureApplyTest : public ::testing::Test {
 protected:
  CaptureApplyTest()
      : src_(/*migrate=*/false),
        tgt_(/*migrate=*/false),
        ds_({{"a", src_.url().Unmasked()}, {"b", tgt_.url().Unmasked()}}) {}

  std::unique_ptr<StepHandler> Step(std::map<std::string, std::string> where = {}) {
    CaptureSettings c;
    c.source = "a";
    c.target = "b";
    c.tables = {"d", "p"};
    c.where = std::move(where);
    StepSpec spec;
    spec.name = "apply";
    spec.type = "capture_sync";
    spec.params = json::object();
    return MakeCaptureSyncStep(spec, std::make_shared<const std::map<std::string, CaptureSettings>>(
                                         std::map<std::string, CaptureSettings>{{"cap", c}}));
  }

  static json Keyed(const std::string& table, json keys, const std::string& schema = "s1") {
    return {{"capture", "cap"}, {"table", table}, {"keys", std::move(keys)}, {"gtid", "0-1-5"},
            {"committed_at", 1700000000}, {"schema", schema}};
  }

  // Every row of `table` as exact text (QUOTE of every column), in key order.
  static std::vector<std::string> Dump(TestSchema& db, const std::string& table, const std::string& where = "1 = 1") {
    return db.pool().Run("dump", [&](storage::Connection& c) {
      std::string exprs;
      auto cols = c.Query("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                          "AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                          table);
      while (cols->next()) exprs += (exprs.empty() ? "" : ", '|', ") + ("QUOTE(`" + std::string(cols->getString(1)) + "`)");
      std::vector<std::string> rows;
      auto rs = c.Query("SELECT CONCAT(" + exprs + ") FROM `" + table + "` WHERE " + where + " ORDER BY 1");
      while (rs->next()) rows.push_back(std::string(rs->getString(1)));
      return rows;
    });
  }

  void Both(const std::string& sql) {
    src_.Exec(sql);
    tgt_.Exec(sql);
  }

  TestSchema src_;
  TestSchema tgt_;
  Datasources ds_;
};

constexpr const char* kTables[] = {
    "CREATE TABLE d (id BIGINT PRIMARY KEY, space INT NOT NULL, title VARCHAR(50) NULL, data BLOB NULL, "
    "at DATETIME(3) NULL) DEFAULT CHARSET=utf8mb4",
    // a composite key with a case-insensitive text column
    "CREATE TABLE p (g INT NOT NULL, name VARCHAR(20) NOT NULL, n INT NULL, PRIMARY KEY (g, name)) "
    "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"};

TEST_F(CaptureApplyTest, KeysConvergeToTheSourceUnderTheFilterAndCompensateByteForByte) {
  for (const char* t : kTables) Both(t);
  src_.Exec("INSERT INTO d VALUES (1, 1, 'new title', 0x00FF, '2024-02-29 23:59:59.123'), (2, 1, NULL, NULL, NULL), "
            "(3, 2, 'left the filter', NULL, NULL), (6, 1, 'same', 0x06, NULL), (7, 1, 'untouched', NULL, NULL)");
  tgt_.Exec("INSERT INTO d VALUES (1, 1, 'old title', 0x00, NULL), (3, 1, 'was in the filter', NULL, NULL), "
            "(4, 1, 'deleted on the source', NULL, NULL), (5, 2, 'outside the filter, gone from the source', NULL, NULL), "
            "(6, 1, 'same', 0x06, NULL), (7, 1, 'not a key of the event', NULL, NULL)");
  const auto before = Dump(tgt_, "d");
  auto step = Step({{"d", "space = 1"}});
  Ctx ctx(ds_, Keyed("d", json::array({{1}, {2}, {3}, {4}, {5}, {6}})), "cap:ev1#0");
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["inserted"], 1);   // 2
  EXPECT_EQ(r.output["updated"], 1);    // 1
  EXPECT_EQ(r.output["unchanged"], 1);  // 6
  EXPECT_EQ(r.output["deleted"], 2);    // 3 (left the filter), 4 (gone); 5 is outside the filter on the target
  EXPECT_EQ(Dump(tgt_, "d", "id IN (1, 2, 6)"), Dump(src_, "d", "id IN (1, 2, 6)"));
  EXPECT_EQ(Dump(tgt_, "d", "id IN (3, 4)"), std::vector<std::string>{});
  EXPECT_EQ(Dump(tgt_, "d", "id IN (5, 7)"),
            (std::vector<std::string>{"'5'|'2'|'outside the filter, gone from the source'|NULL|NULL",
                                      "'7'|'1'|'not a key of the event'|NULL|NULL"}));
  ASSERT_TRUE(r.compensation_data.has_value());
  EXPECT_EQ((*r.compensation_data)["format"], 2);

  // Applied again (a later claim after this one committed): converges, and the
  // compensation, last record first, restores the first before-image.
  Ctx again(ds_, ctx.payload(), "cap:ev1#0");
  again.attempt_no = 2;
  StepResult r2 = step->Execute(again);
  ASSERT_EQ(r2.kind, StepResult::Kind::kOk) << r2.error;
  EXPECT_EQ(r2.output["unchanged"], 3);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk WHERE step_code = 'cap:ev1#0' AND chunk_no > 0"), 2);
  again.compensation = *r2.compensation_data;
  StepResult c = step->Compensate(again);
  ASSERT_EQ(c.kind, StepResult::Kind::kOk) << c.error;
  EXPECT_EQ(Dump(tgt_, "d"), before);
}

TEST_F(CaptureApplyTest, CompositeAndCaseInsensitiveKeysAreNotDeletedByTheirSpelling) {
  for (const char* t : kTables) Both(t);
  src_.Exec("INSERT INTO p VALUES (1, 'ABC', 10), (1, 'x', 11), (2, 'abc', 20)");
  tgt_.Exec("INSERT INTO p VALUES (1, 'abc', 1), (1, 'gone', 2), (2, 'abc', 3), (3, 'keep', 4)");
  const auto before = Dump(tgt_, "p");
  auto step = Step();
  // 'abc' of group 1 is the source's 'ABC' in SQL terms: upserted, not deleted.
  Ctx ctx(ds_, Keyed("p", json::array({{1, "abc"}, {1, "x"}, {1, "gone"}, {2, "abc"}})), "cap:ev2#0");
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["deleted"], 1);
  EXPECT_EQ(Dump(tgt_, "p", "g < 3"), Dump(src_, "p"));
  EXPECT_EQ(Dump(tgt_, "p", "g = 3"), std::vector<std::string>{"'3'|'keep'|'4'"});
  ctx.compensation = *r.compensation_data;
  StepResult c = step->Compensate(ctx);
  ASSERT_EQ(c.kind, StepResult::Kind::kOk) << c.error;
  EXPECT_EQ(Dump(tgt_, "p"), before);
}

TEST_F(CaptureApplyTest, ASupersededClaimWritesNothing) {
  for (const char* t : kTables) Both(t);
  src_.Exec("INSERT INTO d VALUES (1, 1, 'v1', NULL, NULL)");
  auto step = Step();
  Ctx later(ds_, Keyed("d", json::array({{1}})), "cap:ev3#0");
  later.attempt_no = 3;
  ASSERT_EQ(step->Execute(later).kind, StepResult::Kind::kOk);
  src_.Exec("UPDATE d SET title = 'v2' WHERE id = 1");
  Ctx stale(ds_, Keyed("d", json::array({{1}})), "cap:ev3#0");
  stale.attempt_no = 1;  // the first claim, still running on a frozen node
  StepResult r = step->Execute(stale);
  EXPECT_EQ(r.kind, StepResult::Kind::kTransient) << r.error;
  EXPECT_NE(r.error.find("taken over"), std::string::npos) << r.error;
  EXPECT_EQ(Dump(tgt_, "d"), std::vector<std::string>{"'1'|'1'|'v1'|NULL|NULL"});
}

TEST_F(CaptureApplyTest, TheEventsOfALaterCopyDescribeTheTableAgain) {
  for (const char* t : kTables) Both(t);
  src_.Exec("INSERT INTO d VALUES (1, 1, 'a', NULL, NULL)");
  auto step = Step();
  Ctx first(ds_, Keyed("d", json::array({{1}}), "s1"), "cap:ev4#0");
  ASSERT_EQ(step->Execute(first).kind, StepResult::Kind::kOk);
  // A column added on both sides (the reader paused the table; the operator aligned
  // the target and resumed: a new copy, whose events name it).
  Both("ALTER TABLE d ADD COLUMN extra VARCHAR(10) NULL");
  src_.Exec("UPDATE d SET extra = 'new', title = 'b' WHERE id = 1");
  Ctx old_schema(ds_, Keyed("d", json::array({{1}}), "s1"), "cap:ev5#0");
  ASSERT_EQ(step->Execute(old_schema).kind, StepResult::Kind::kOk);
  // The description of copy s1 syncs the columns it knew.
  EXPECT_EQ(Dump(tgt_, "d"), std::vector<std::string>{"'1'|'1'|'b'|NULL|NULL|NULL"});
  Ctx new_schema(ds_, Keyed("d", json::array({{1}}), "s2"), "cap:ev6#0");
  ASSERT_EQ(step->Execute(new_schema).kind, StepResult::Kind::kOk);
  EXPECT_EQ(Dump(tgt_, "d"), Dump(src_, "d"));
  // A dropped column fails the described read: the apply describes the table again
  // and goes on (as the events queued before a DDL pause do).
  Both("ALTER TABLE d DROP COLUMN at");
  src_.Exec("UPDATE d SET title = 'c' WHERE id = 1");
  Ctx dropped(ds_, Keyed("d", json::array({{1}}), "s2"), "cap:ev7#0");
  StepResult r = step->Execute(dropped);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Dump(tgt_, "d"), Dump(src_, "d"));
}

TEST_F(CaptureApplyTest, AChunkTableDroppedBehindItsBackIsCreatedAgainOnTheRetry) {
  for (const char* t : kTables) Both(t);
  src_.Exec("INSERT INTO d VALUES (1, 1, 'a', NULL, NULL)");
  auto step = Step();
  Ctx first(ds_, Keyed("d", json::array({{1}})), "cap:ev10#0");
  ASSERT_EQ(step->Execute(first).kind, StepResult::Kind::kOk);
  tgt_.Exec("DROP TABLE dsync_sync_chunk");
  src_.Exec("UPDATE d SET title = 'b' WHERE id = 1");
  Ctx second(ds_, Keyed("d", json::array({{1}})), "cap:ev11#0");
  EXPECT_THROW(step->Execute(second), DbError);  // transient: the engine retries
  second.attempt_no = 2;
  StepResult r = step->Execute(second);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Dump(tgt_, "d"), Dump(src_, "d"));
}

TEST_F(CaptureApplyTest, BadKeysFailPermanentlyWritingNothing) {
  for (const char* t : kTables) Both(t);
  src_.Exec("INSERT INTO p VALUES (1, 'a', 1)");
  auto step = Step();
  Ctx wrong_arity(ds_, Keyed("p", json::array({{1}})), "cap:ev8#0");
  StepResult r = step->Execute(wrong_arity);
  EXPECT_EQ(r.kind, StepResult::Kind::kPermanent);
  EXPECT_NE(r.error.find("primary key"), std::string::npos) << r.error;
  Ctx not_captured(ds_, {{"capture", "cap"}, {"table", "zz"}, {"keys", json::array({{1}})}}, "cap:ev9#0");
  EXPECT_EQ(step->Execute(not_captured).kind, StepResult::Kind::kPermanent);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM p"), 0);
}

}  // namespace
}  // namespace dsync::saga
