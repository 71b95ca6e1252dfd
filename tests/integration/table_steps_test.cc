// table_sync and table_delete against a real MariaDB: two fresh schemas as the
// source and target datasources, a fake StepContext, and ordered dumps of whole
// tables (every column as exact text) compared before and after.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "saga/step_handler.h"
#include "saga/steps/table_steps.h"
#include "saga/steps/table_verify.h"
#include "table/chunk_table.h"
#include "table/run_context.h"
#include "table/spec.h"
#include "table/sync.h"
#include "tests/support/fake_clock.h"
#include "tests/support/saga_fixtures.h"
#include "tests/support/test_db.h"

namespace dsync::saga {
namespace {

using nlohmann::json;
using testing::TestSchema;

// The URL a datasource needs (with its password; test code only).
std::string FullUrl(const storage::DbUrl& u) {
  return u.Unmasked();
}

class FakeContext : public StepContext {
 public:
  FakeContext(Datasources& ds, json payload, std::string key = "EV-1#0")
      : ds_(ds), payload_(std::move(payload)), key_(std::move(key)) {}

  const std::string& event_code() const override { return event_; }
  const std::string& step_name() const override { return step_; }
  const std::string& idempotency_key() const override { return key_; }
  const json& payload() const override { return payload_; }
  int attempt() const override { return attempt_no; }
  int step_retry_count() const override { return 0; }
  const json& compensation_data() const override { return compensation; }
  Clock::TimePoint deadline() const override { return deadline_; }
  Clock& clock() override { return clock_; }
  std::stop_token stop_token() const override { return stop.get_token(); }
  storage::Connection& tx() override { throw std::logic_error("table steps must not use the framework tx"); }
  bool StillOwner() override {
    ++owner_checks;
    if (on_owner_check) on_owner_check(owner_checks);
    if (owner_checks_left >= 0 && owner_checks_left-- == 0) owner = false;
    return owner;
  }
  void ReportProgress(const json& p) override { progress.push_back(p); }
  Datasources& datasources() override { return ds_; }

  json compensation = nullptr;  // what Compensate sees
  int attempt_no = 1;           // the event's claim attempt
  std::function<void(int)> on_owner_check;  // called with the check's number
  std::stop_source stop;
  bool owner = true;
  int owner_checks = 0;
  int owner_checks_left = -1;  // >= 0: ownership is lost after that many more checks
  std::vector<json> progress;

 private:
  SystemClock clock_;  // a step's time is the process's here
  const Clock::TimePoint deadline_ = clock_.Now() + std::chrono::hours(1);
  Datasources& ds_;
  json payload_;
  std::string key_;
  std::string event_ = "EV-1";
  std::string step_ = "docs";
};

constexpr const char* kDocTable = R"(
CREATE TABLE kb_doc (
  id BIGINT NOT NULL PRIMARY KEY,
  space_id INT NOT NULL,
  kind VARCHAR(40) NOT NULL,
  title VARCHAR(200) NULL,
  price DECIMAL(30,10) NULL,
  ratio DOUBLE NULL,
  weight FLOAT NULL,
  updated_at DATETIME(3) NULL,
  data BLOB NULL,
  meta JSON NULL,
  flags BIT(8) NULL,
  big BIGINT UNSIGNED NULL,
  KEY idx_space (space_id)
) DEFAULT CHARSET=utf8mb4)";

// Rows with every awkward value: NULLs, emoji, a BLOB with bytes 0x00..0xFF,
// DATETIME(3), big DECIMAL, doubles that 15 digits cannot hold, JSON, BIT, 2^64-1.
constexpr const char* kDocRows = R"(
INSERT INTO kb_doc VALUES
 (1, 1, 'doc', 'hello 😀 world', 12345678901234567890.0000000001, 0.1e0 + 0.2e0, 0.1,
  '2024-02-29 23:59:59.123', (SELECT UNHEX(GROUP_CONCAT(LPAD(HEX(seq), 2, '0') ORDER BY seq SEPARATOR ''))
                              FROM seq_0_to_255), '{"a": [1, "x"], "b": null}', b'10100101', 18446744073709551615),
 (2, 1, 'doc', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (3, 1, 'img', '', 0.0000000001, 1.7976931348623157e308, -3.4e38, '1970-01-01 00:00:01.000', '', '[]', b'0', 0),
 (4, 1, 'x''; DROP TABLE kb_doc; --', 'quote''s', -1, -0.0, 1e-30, '2038-01-19 03:14:08.999', 0x00, 'null', b'1', 1),
 (5, 2, 'doc', 'other space', 1, 1, 1, '2000-01-01 00:00:00.000', 0xFF, '{}', b'11111111', 5),
 (6, 1, 'doc', 'six', 6, 6, 6, '2001-01-01 00:00:00.500', 0x0606, '{"six": 6}', b'110', 6))";

// Numbered rows in groups (g), for the chunking and resume tests.
constexpr const char* kNumberedTable =
    "CREATE TABLE n (id INT PRIMARY KEY, v VARCHAR(20), g INT) DEFAULT CHARSET=utf8mb4";

class TableStepsTest : public ::testing::Test {
 protected:
  TableStepsTest()
      : src_(/*migrate=*/false),
        tgt_(/*migrate=*/false),
        ds_({{"env_a", FullUrl(src_.url())}, {"env_b", FullUrl(tgt_.url())}}) {}

  static StepSpec Spec(const std::string& type, json params, const std::string& name = "docs") {
    return testing::Step(name, type, std::move(params));
  }

  std::unique_ptr<StepHandler> Sync(const std::string& where, json extra = json::object(),
                                    const std::string& table = "kb_doc") {
    json p = {{"source", "env_a"}, {"target", "env_b"}, {"table", table}, {"where", where}};
    p.update(extra);
    return MakeTableSyncStep(Spec("table_sync", p));
  }

  // Every row of `table`, ordered by `order`, each column as exact text: QUOTE() for
  // everything (NULL as NULL, bytes as they are), doubles as their exact decimal.
  static std::vector<std::string> Dump(TestSchema& db, const std::string& table, const std::string& order,
                                       const std::string& where = "1 = 1") {
    return db.pool().Run("dump", [&](storage::Connection& c) {
      std::string exprs;
      auto cols = c.Query(
          "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
          "AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
          table);
      while (cols->next()) {
        std::string name = std::string(cols->getString(1)), type = std::string(cols->getString(2));
        std::string e = (type == "double" || type == "float")
                            ? "IFNULL(CAST(`" + name + "` AS DECIMAL(65,30)), 'NULL')"
                            : "QUOTE(`" + name + "`)";
        exprs += (exprs.empty() ? "" : ", '|', ") + e;
      }
      std::vector<std::string> rows;
      auto rs = c.Query("SELECT CONCAT(" + exprs + ") FROM `" + table + "` WHERE " + where + " ORDER BY " + order);
      while (rs->next()) rows.push_back(std::string(rs->getString(1)));
      return rows;
    });
  }

  // Rows of the two schemas' `table` that differ in any column (null-safe, exact for
  // doubles); both schemas live on the same server.
  int64_t CrossDiff(const std::string& table, const std::string& key, const std::string& cols,
                    const std::string& where) {
    std::string cond;
    size_t start = 0;
    while (start < cols.size()) {
      size_t comma = cols.find(',', start);
      std::string c = cols.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      cond += (cond.empty() ? "" : " AND ") + ("a.`" + c + "` <=> b.`" + c + "`");
      start = comma == std::string::npos ? cols.size() : comma + 1;
    }
    return src_.QueryInt("SELECT COUNT(*) FROM `" + src_.url().schema + "`.`" + table + "` a LEFT JOIN `" +
                         tgt_.url().schema + "`.`" + table + "` b USING (" + key + ") WHERE (" + where +
                         ") AND NOT (" + cond + ")");
  }

  // The before-image of chunk `n` of the step, from the target's undo records.
  json ChunkImage(int n, const std::string& step_code = "EV-1#0") {
    return tgt_.pool().Run("chunk image", [&](storage::Connection& c) {
      auto v = c.QueryString("SELECT before_image FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no = ?",
                             step_code, n);
      return v ? json::parse(*v) : json();
    });
  }

  // The table `ddl` creates, in the source and in the target.
  void CreateInBoth(const std::string& ddl) {
    src_.Exec(ddl);
    tgt_.Exec(ddl);
  }
  void CreateDocs() {
    CreateInBoth(kDocTable);
    src_.Exec(kDocRows);
  }

  // The step run again by another event (its own chunk records): a re-sync.
  StepResult RunAsAnotherEvent(StepHandler& step, json payload) {
    FakeContext again(ds_, std::move(payload), "EV-2#0");
    StepResult r = step.Execute(again);
    EXPECT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
    return r;
  }

  // Compensates the run that returned `r` as the engine would (with the run's
  // compensation data): that must succeed and leave the target's `table` (ordered by
  // `order`) as it was `before` the run. Returns the compensation's result.
  StepResult ExpectCompensationRestores(StepHandler& step, FakeContext& ctx, const StepResult& r,
                                        const std::string& table, const std::string& order,
                                        const std::vector<std::string>& before) {
    ctx.compensation = *r.compensation_data;
    StepResult c = step.Compensate(ctx);
    EXPECT_EQ(c.kind, StepResult::Kind::kOk) << c.error;
    EXPECT_EQ(Dump(tgt_, table, order), before);
    return c;
  }

  TestSchema src_;
  TestSchema tgt_;
  Datasources ds_;
};

// The counts every table_sync output has (the chunk figures are checked separately).
json Classic(const json& out) {
  json c;
  for (const char* k : {"rows", "inserted", "updated", "unchanged", "deleted"}) {
    if (out.contains(k)) c[k] = out[k];
  }
  return c;
}

constexpr const char* kDocCols = "id,space_id,kind,title,price,ratio,weight,updated_at,data,meta,flags,big";

TEST_F(TableStepsTest, SyncCopiesMatchingRowsExactly) {
  CreateDocs();
  auto step = Sync("space_id = :space_id");
  FakeContext ctx(ds_, {{"space_id", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 5}, {"inserted", 5}, {"updated", 0}, {"unchanged", 0}}));
  EXPECT_EQ(r.output["chunks_written"], 1);
  EXPECT_FALSE(r.output.contains("source_columns_not_in_target")) << r.output.dump();
  EXPECT_EQ(ctx.owner_checks, 1);

  auto source = Dump(src_, "kb_doc", "id", "space_id = 1");
  ASSERT_EQ(source.size(), 5u);
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id"), source);
  EXPECT_EQ(CrossDiff("kb_doc", "id", kDocCols, "a.space_id = 1"), 0);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc WHERE space_id = 2"), 0);
  EXPECT_EQ(tgt_.QueryInt("SELECT LENGTH(data) FROM kb_doc WHERE id = 1"), 256);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc WHERE id = 1 AND ratio = 0.1e0 + 0.2e0 AND weight = "
                          "(SELECT weight FROM `" + src_.url().schema + "`.kb_doc WHERE id = 1)"),
            1);

  // The engine keeps a reference; the before-image (every row created, none
  // restored) is the chunk's undo record in the target.
  // With it, the target's shape over the image's columns and its fingerprint (schema
  // preflight), and in the record the hash of each row as the chunk left it.
  ASSERT_TRUE(r.compensation_data.has_value());
  json ref = *r.compensation_data;
  EXPECT_EQ(ref["schema"]["columns"][3], (json{"title", "varchar(200)", true, "utf8mb4_general_ci"}));
  EXPECT_EQ(ref["schema_fingerprint"], r.output["schema_fingerprint"]);
  ref.erase("schema");
  ref.erase("schema_fingerprint");
  EXPECT_EQ(ref, (json{{"format", 2}, {"undo", "dsync_sync_chunk"}, {"target", "env_b"},
                       {"table", "kb_doc"}, {"step_code", "EV-1#0"}, {"chunks", 1}}));
  json image = ChunkImage(1);
  EXPECT_EQ(image["remove"].size(), 5u);
  EXPECT_EQ(image["restore"].size(), 0u);
  ASSERT_EQ(image["after"].size(), 5u);
  EXPECT_TRUE(image["after"][0].is_number_unsigned());
  EXPECT_EQ(image["binary"], json{"data"});

  // Running again changes nothing.
  StepResult r2 = RunAsAnotherEvent(*step, {{"space_id", 1}});
  EXPECT_EQ(Classic(r2.output), (json{{"rows", 5}, {"inserted", 0}, {"updated", 0}, {"unchanged", 5}}));
  EXPECT_EQ(r2.output["chunks_equal"], 1);  // the checksums matched: no row was read
  EXPECT_EQ(r2.output["rows_fetched"], 0);
}

TEST_F(TableStepsTest, CompensationRestoresTheBeforeImageByteForByte) {
  CreateDocs();
  // The target: id 1 and 3 differ (updated), id 6 identical, id 5 belongs to another
  // space (never touched), id 9 matches the filter but is not in the source (kept).
  tgt_.Exec(kDocRows);
  tgt_.Exec("UPDATE kb_doc SET title = 'old', price = NULL, data = 0x00FF00 WHERE id = 1");
  tgt_.Exec("UPDATE kb_doc SET ratio = 0.5, meta = '{\"old\": true}', updated_at = '1999-12-31 23:59:59.999' WHERE id = 3");
  tgt_.Exec("DELETE FROM kb_doc WHERE id IN (2, 4)");
  tgt_.Exec("UPDATE kb_doc SET title = 'unrelated', ratio = 0.1e0 + 0.7e0 WHERE id = 5");
  tgt_.Exec("INSERT INTO kb_doc (id, space_id, kind, title) VALUES (9, 1, 'doc', 'target only')");
  const auto before = Dump(tgt_, "kb_doc", "id");
  const auto unrelated = Dump(tgt_, "kb_doc", "id", "id IN (5, 9)");

  auto step = Sync("space_id = :space_id");
  FakeContext ctx(ds_, {{"space_id", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 5}, {"inserted", 2}, {"updated", 2}, {"unchanged", 1}}));
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id", "id IN (1, 2, 3, 4, 6)"), Dump(src_, "kb_doc", "id", "space_id = 1"));
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id", "id IN (5, 9)"), unrelated);

  StepResult c = ExpectCompensationRestores(*step, ctx, r, "kb_doc", "id", before);
  EXPECT_EQ(c.output, (json{{"chunks", 1}, {"removed", 2}, {"restored", 2}, {"on_conflict", "fail"}, {"conflicts", 0}}));

  // A second compensation (crash before the engine recorded the first) is harmless.
  StepResult c2 = step->Compensate(ctx);
  ASSERT_EQ(c2.kind, StepResult::Kind::kOk) << c2.error;
  EXPECT_EQ(c2.output, (json{{"already_compensated", true}}));
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id"), before);
}

// A chunk whose integer keys are dense reads the target's rows by one key range
// (table::DenseSpan) instead of key by key. The range also holds rows the chunk does
// not touch (another group's, between its keys): they are not in its before-image, a
// later write to one is no conflict, and compensation leaves them as they are.
TEST_F(TableStepsTest, ADenseChunkRecordsAndRestoresOnlyTheRowsItTouches) {
  CreateInBoth("CREATE TABLE kv (id INT PRIMARY KEY, grp INT NOT NULL, note VARCHAR(40)) DEFAULT CHARSET=utf8mb4");
  src_.Exec("INSERT INTO kv SELECT seq, seq % 2, CONCAT('src ', seq) FROM seq_1_to_200");
  // The target: the even rows (group 0, not synced) and one odd row, stale.
  tgt_.Exec("INSERT INTO kv SELECT seq, 0, CONCAT('mine ', seq) FROM seq_2_to_200_step_2");
  tgt_.Exec("INSERT INTO kv VALUES (7, 1, 'stale')");
  const auto before_synced = Dump(tgt_, "kv", "id", "grp = 1");

  auto step = Sync("grp = :grp", json::object(), "kv");
  FakeContext ctx(ds_, {{"grp", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 100}, {"inserted", 99}, {"updated", 1}, {"unchanged", 0}}));
  EXPECT_EQ(Dump(tgt_, "kv", "id", "grp = 1"), Dump(src_, "kv", "id", "grp = 1"));
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kv WHERE grp = 0 AND note = CONCAT('mine ', id)"), 100);
  json image = ChunkImage(1);
  EXPECT_EQ(image["restore"], (json{{"7", "1", "stale"}}));
  EXPECT_EQ(image["remove"].size(), 99u);
  ASSERT_EQ(image["after"].size(), 100u);
  for (const json& h : image["after"]) EXPECT_TRUE(h.is_number_unsigned()) << image["after"].dump();

  tgt_.Exec("UPDATE kv SET note = 'later' WHERE id = 8");
  ctx.compensation = *r.compensation_data;
  StepResult c = step->Compensate(ctx);
  ASSERT_EQ(c.kind, StepResult::Kind::kOk) << c.error;
  EXPECT_EQ(c.output, (json{{"chunks", 1}, {"removed", 99}, {"restored", 1}, {"on_conflict", "fail"}, {"conflicts", 0}}));
  EXPECT_EQ(Dump(tgt_, "kv", "id", "grp = 1"), before_synced);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kv WHERE grp = 0 AND note = CONCAT('mine ', id)"), 99);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kv WHERE id = 8 AND note = 'later'"), 1);

  // Synced again, then a production write to a synced row of the range: a conflict,
  // named by its key.
  FakeContext again(ds_, {{"grp", 1}}, "EV-2#0");
  StepResult r2 = step->Execute(again);
  ASSERT_EQ(r2.kind, StepResult::Kind::kOk) << r2.error;
  tgt_.Exec("UPDATE kv SET note = 'production' WHERE id = 9");
  again.compensation = *r2.compensation_data;
  StepResult c2 = step->Compensate(again);
  EXPECT_EQ(c2.kind, StepResult::Kind::kPermanent);
  EXPECT_NE(c2.error.find("[\"9\"]"), std::string::npos) << c2.error;
}

// A chunk that compares covers up to 4x chunk_size rows but holds (fetches and
// writes) at most chunk_size; a range with more differing rows is retried smaller.
TEST_F(TableStepsTest, CompareChunksCoverMoreRowsThanTheyHold) {
  CreateInBoth("CREATE TABLE kv (id INT PRIMARY KEY, grp INT NOT NULL, note VARCHAR(40)) DEFAULT CHARSET=utf8mb4");
  src_.Exec("INSERT INTO kv SELECT seq, 1, CONCAT('n ', seq) FROM seq_1_to_6000");
  tgt_.Exec("INSERT INTO kv SELECT * FROM `" + src_.url().schema + "`.kv");
  // Ids 1-3000: one row in 100 differs; 3001-6000: one in 3 (more than a quarter of a
  // 400-row range).
  tgt_.Exec("UPDATE kv SET note = 'stale' WHERE (id <= 3000 AND id % 100 = 0) OR (id > 3000 AND id % 3 = 0)");
  auto step = Sync("grp = :grp", {{"chunk_size", 100}}, "kv");
  FakeContext ctx(ds_, {{"grp", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 6000}, {"inserted", 0}, {"updated", 30 + 1000}, {"unchanged", 4970}}));
  EXPECT_EQ(r.output["rows_fetched"], 1030);
  EXPECT_EQ(Dump(tgt_, "kv", "id"), Dump(src_, "kv", "id"));
  auto chunks = [&](const std::string& what) {
    return tgt_.QueryInt("SELECT " + what + " FROM dsync_sync_chunk WHERE step_code = 'EV-1#0' AND chunk_no > 0");
  };
  EXPECT_EQ(chunks("MAX(rows_read)"), 400);      // a compare chunk covered 4x chunk_size
  EXPECT_LE(chunks("MAX(rows_written)"), 100);   // and wrote at most chunk_size
  EXPECT_EQ(chunks("SUM(rows_written)"), 1030);
  EXPECT_LT(chunks("COUNT(*)"), 6000 / 100);     // fewer transactions than chunks of chunk_size
}

// A compare chunk of 4x chunk_size that finds the target's range empty copies at most
// chunk_size rows of it.
TEST_F(TableStepsTest, AnEmptyTargetRangeFoundByALargeCompareChunkIsCopiedInChunksOfChunkSize) {
  CreateInBoth("CREATE TABLE kv (id INT PRIMARY KEY, grp INT NOT NULL, note VARCHAR(40)) DEFAULT CHARSET=utf8mb4");
  src_.Exec("INSERT INTO kv SELECT seq, 1, CONCAT('n ', seq) FROM seq_1_to_1000");
  tgt_.Exec("INSERT INTO kv SELECT * FROM `" + src_.url().schema + "`.kv WHERE id <= 400");
  auto step = Sync("grp = :grp", {{"chunk_size", 100}}, "kv");
  FakeContext ctx(ds_, {{"grp", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 1000}, {"inserted", 600}, {"updated", 0}, {"unchanged", 400}}));
  EXPECT_EQ(r.output["chunks_equal"], 1);  // ids 1-400, one compare chunk
  EXPECT_EQ(Dump(tgt_, "kv", "id"), Dump(src_, "kv", "id"));
  EXPECT_EQ(tgt_.QueryInt("SELECT MAX(rows_written) FROM dsync_sync_chunk WHERE step_code = 'EV-1#0'"), 100);
  EXPECT_EQ(tgt_.QueryInt("SELECT SUM(rows_written) FROM dsync_sync_chunk WHERE step_code = 'EV-1#0'"), 600);
}

// A copy that reaches rows the target already holds goes back to comparing: ids 1-400
// are new (copied), 401-1000 are equal; after the first copy chunk that finds its rows
// unchanged, the rest is compared by checksums and no row of it is read whole.
TEST_F(TableStepsTest, ACopyThatMeetsEqualRowsGoesBackToComparing) {
  CreateInBoth("CREATE TABLE kv (id INT PRIMARY KEY, grp INT NOT NULL, note VARCHAR(40)) DEFAULT CHARSET=utf8mb4");
  src_.Exec("INSERT INTO kv SELECT seq, 1, CONCAT('n ', seq) FROM seq_1_to_1000");
  tgt_.Exec("INSERT INTO kv SELECT * FROM `" + src_.url().schema + "`.kv WHERE id > 400");
  auto step = Sync("grp = :grp", {{"chunk_size", 100}}, "kv");
  FakeContext ctx(ds_, {{"grp", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 1000}, {"inserted", 400}, {"updated", 0}, {"unchanged", 600}}));
  EXPECT_EQ(Dump(tgt_, "kv", "id"), Dump(src_, "kv", "id"));
  // 400 copied, then one copy chunk of 100 equal rows; the other 500 only compared.
  EXPECT_EQ(r.output["rows_fetched"], 500);
  EXPECT_GE(r.output["chunks_equal"], 1);
}

// Without `columns`, the columns both tables have are synced and the source's others
// are named in the output; with `columns`, nothing is named.
TEST_F(TableStepsTest, SourceColumnsTheTargetLacksAreNamedInTheOutput) {
  src_.Exec("CREATE TABLE kv (id INT PRIMARY KEY, grp INT NOT NULL, note VARCHAR(40), secret VARCHAR(40), "
            "twice INT AS (grp * 2) VIRTUAL)");
  tgt_.Exec("CREATE TABLE kv (id INT PRIMARY KEY, grp INT NOT NULL, note VARCHAR(40), kept INT DEFAULT 7)");
  src_.Exec("INSERT INTO kv (id, grp, note, secret) VALUES (1, 1, 'a', 's1'), (2, 1, 'b', 's2')");
  auto step = Sync("grp = :grp", json::object(), "kv");
  FakeContext ctx(ds_, {{"grp", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["source_columns_not_in_target"], json::array({"secret"}));  // generated ones are computed
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kv WHERE kept = 7 AND note IN ('a', 'b')"), 2);

  auto listed = Sync("grp = :grp", {{"columns", {"id", "grp", "note"}}}, "kv");
  StepResult r2 = RunAsAnotherEvent(*listed, {{"grp", 1}});
  EXPECT_FALSE(r2.output.contains("source_columns_not_in_target")) << r2.output.dump();
}

TEST_F(TableStepsTest, ReRunAfterACommitResumesAndKeepsTheOriginalBeforeImage) {
  CreateDocs();
  tgt_.Exec(kDocRows);
  tgt_.Exec("UPDATE kb_doc SET title = 'original' WHERE id IN (1, 6)");
  tgt_.Exec("DELETE FROM kb_doc WHERE id = 2");
  const auto before = Dump(tgt_, "kb_doc", "id");

  auto step = Sync("space_id = :space_id");
  FakeContext ctx(ds_, {{"space_id", 1}});
  StepResult first = step->Execute(ctx);
  ASSERT_EQ(first.kind, StepResult::Kind::kOk) << first.error;

  // The node died before recording SUCCESS; meanwhile the source changed. The next
  // owner runs the step again with the same idempotency key: every range is
  // committed already, so it reads and writes nothing, and the first image stays.
  src_.Exec("UPDATE kb_doc SET title = 'changed again' WHERE id IN (1, 3)");
  StepResult second = step->Execute(ctx);
  ASSERT_EQ(second.kind, StepResult::Kind::kOk) << second.error;
  EXPECT_EQ(second.output["resumed_after_chunk"], 1);
  EXPECT_EQ(second.output["resumed_rows_written"], 3);
  EXPECT_EQ(second.output["rows"], 0);
  EXPECT_EQ(ChunkImage(1)["restore"][0][3], "original");

  ExpectCompensationRestores(*step, ctx, second, "kb_doc", "id", before);
}

// A run stopped after some chunks (here: ownership lost at the 4th chunk's commit)
// leaves those chunks committed with their checkpoint; the next run resumes after
// them, copies only the rest, and compensation undoes both runs' chunks exactly.
TEST_F(TableStepsTest, InterruptedRunResumesFromTheCheckpoint) {
  CreateInBoth(kNumberedTable);
  src_.Exec("INSERT INTO n SELECT seq, CONCAT('v', seq), 1 FROM seq_1_to_1000");
  tgt_.Exec("INSERT INTO n SELECT seq, 'old', 1 FROM seq_1_to_1000 WHERE seq % 2 = 0");
  const auto before = Dump(tgt_, "n", "id");
  auto step = Sync("g = :g", {{"chunk_size", 100}}, "n");
  FakeContext ctx(ds_, {{"g", 1}});
  ctx.owner_checks_left = 3;
  StepResult r = step->Execute(ctx);
  EXPECT_EQ(r.kind, StepResult::Kind::kTransient);
  EXPECT_NE(r.error.find("lost ownership"), std::string::npos) << r.error;
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk WHERE chunk_no > 0"), 3);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM n WHERE v <> 'old'"), 300);  // 3 chunks of 100

  FakeContext next(ds_, {{"g", 1}});  // the next owner, same step code
  StepResult r2 = step->Execute(next);
  ASSERT_EQ(r2.kind, StepResult::Kind::kOk) << r2.error;
  EXPECT_EQ(r2.output["resumed_after_chunk"], 3);
  EXPECT_EQ(r2.output["resumed_rows_written"], 300);
  EXPECT_EQ(r2.output["rows"], 700);  // only the ranges after the checkpoint
  EXPECT_EQ(r2.output["inserted"], 350);
  EXPECT_EQ(r2.output["updated"], 350);
  EXPECT_EQ(r2.output["chunk_records"], 10);
  EXPECT_EQ(Dump(tgt_, "n", "id"), Dump(src_, "n", "id"));

  StepResult c = ExpectCompensationRestores(*step, next, r2, "n", "id", before);
  EXPECT_EQ(c.output, (json{{"chunks", 10}, {"removed", 500}, {"restored", 500}, {"on_conflict", "fail"},
                             {"conflicts", 0}}));
  EXPECT_EQ(step->Compensate(next).output, (json{{"already_compensated", true}}));
}

// Lanes (table/planner.h "Lanes"): a table of one integer key is split into key ranges
// worked at once, each with its own checkpoint. Interrupted, each lane resumes from its
// own; together they cover every key once, rows the target alone holds below and above
// the source's keys included (delete_missing), and compensation restores exactly.
TEST_F(TableStepsTest, LanesResumeEachFromItsOwnCheckpointAndCompensateExactly) {
  CreateInBoth(kNumberedTable);
  src_.Exec("INSERT INTO n SELECT seq, CONCAT('v', seq), 1 FROM seq_1_to_100000");
  tgt_.Exec("INSERT INTO n SELECT seq, 'old', 1 FROM seq_1_to_100000 WHERE seq % 3 = 0");
  tgt_.Exec("INSERT INTO n VALUES (-5, 'target only', 1), (100500, 'target only', 1)");
  const auto before = Dump(tgt_, "n", "id");
  auto step = Sync("g = :g", {{"chunk_size", 1000}, {"delete_missing", true}, {"lanes", 2}}, "n");
  FakeContext ctx(ds_, {{"g", 1}});
  ctx.owner_checks_left = 10;
  StepResult r = step->Execute(ctx);
  EXPECT_EQ(r.kind, StepResult::Kind::kTransient);
  EXPECT_NE(r.error.find("lost ownership"), std::string::npos) << r.error;
  // Split at the middle of the source's keys; both lanes committed chunks.
  EXPECT_EQ(tgt_.QueryInt(R"(SELECT hi_key = '[["50000"]]' FROM dsync_sync_chunk WHERE chunk_no = 0)"), 1);
  const int64_t records = tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk WHERE chunk_no > 0");
  EXPECT_EQ(records, 10);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk WHERE chunk_no > 0 AND lo_key IS NULL"), 1);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk WHERE chunk_no > 0 AND lo_key = '[\"50000\"]'"), 1);
  EXPECT_EQ(tgt_.QueryInt("SELECT MAX(chunk_no) FROM dsync_sync_chunk"), records);  // numbered as committed
  const int64_t read_first = tgt_.QueryInt("SELECT SUM(rows_read) FROM dsync_sync_chunk WHERE chunk_no > 0");
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM n WHERE id = -5"), 0);  // by the first lane's first chunk

  FakeContext next(ds_, {{"g", 1}});  // the next owner, same step code
  next.attempt_no = 2;
  StepResult r2 = step->Execute(next);
  ASSERT_EQ(r2.kind, StepResult::Kind::kOk) << r2.error;
  EXPECT_EQ(r2.output["lanes"], 2);
  EXPECT_EQ(r2.output["resumed_after_chunk"], records);
  EXPECT_EQ(r2.output["rows"], 100000 - read_first);  // only the ranges after each lane's checkpoint
  EXPECT_EQ(r2.output["deleted"], 1);  // above the last lane's last source key
  EXPECT_EQ(Dump(tgt_, "n", "id"), Dump(src_, "n", "id"));
  // Every chunk starts where another ended (or at the start), and no two start alike.
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk a WHERE a.chunk_no > 0 AND a.lo_key IS NOT NULL "
                          "AND NOT EXISTS (SELECT 1 FROM dsync_sync_chunk b WHERE b.chunk_no > 0 "
                          "AND b.hi_key = a.lo_key)"),
            0);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) - COUNT(DISTINCT COALESCE(lo_key, '')) FROM dsync_sync_chunk "
                          "WHERE chunk_no > 0"),
            0);
  EXPECT_EQ(tgt_.QueryInt("SELECT SUM(rows_read) FROM dsync_sync_chunk WHERE chunk_no > 0"), 100000);

  StepResult c = ExpectCompensationRestores(*step, next, r2, "n", "id", before);
  EXPECT_EQ(c.output["removed"], 100000 - 33333);
  EXPECT_EQ(c.output["restored"], 33333 + 2);
}

// A table too small for two lanes of kMinLaneKeys keys, `lanes` 1, or a key that is not
// one integer column: one lane, as before lanes (row 0 records no split).
TEST_F(TableStepsTest, SmallTablesAndOtherKeysRunInOneLane) {
  CreateInBoth(kNumberedTable);
  src_.Exec("INSERT INTO n SELECT seq, CONCAT('v', seq), 1 FROM seq_1_to_39999");
  auto step = Sync("g = :g", {{"chunk_size", 1000}}, "n");
  FakeContext ctx(ds_, {{"g", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_FALSE(r.output.contains("lanes"));
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk WHERE chunk_no = 0 AND hi_key IS NULL"), 1);

  src_.Exec("INSERT INTO n SELECT seq, CONCAT('v', seq), 1 FROM seq_40000_to_100000");
  auto one = Sync("g = :g", {{"chunk_size", 1000}, {"lanes", 1}}, "n");
  FakeContext ctx2(ds_, {{"g", 1}}, "EV-2#0");
  StepResult r2 = one->Execute(ctx2);
  ASSERT_EQ(r2.kind, StepResult::Kind::kOk) << r2.error;
  EXPECT_FALSE(r2.output.contains("lanes"));
  EXPECT_EQ(Dump(tgt_, "n", "id"), Dump(src_, "n", "id"));
}

TEST_F(TableStepsTest, CompensationWithoutUndoRecordsFailsNamingThem) {
  CreateDocs();
  tgt_.Exec(kDocRows);
  tgt_.Exec("UPDATE kb_doc SET kind = 'was' WHERE id = 4");
  auto step = Sync("space_id = :space_id");
  FakeContext ctx(ds_, {{"space_id", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  tgt_.Exec("DELETE FROM dsync_sync_chunk");  // purged, or deleted by hand
  ctx.compensation = *r.compensation_data;
  StepResult c = step->Compensate(ctx);
  EXPECT_EQ(c.kind, StepResult::Kind::kPermanent);
  EXPECT_EQ(c.error, "step 'docs': its 1 chunk record(s) in env_b.dsync_sync_chunk are gone (purged after "
                     "undo_retention_days, or deleted); its before-image cannot be restored");
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc WHERE kind = 'was'"), 0);  // nothing half-restored
}

TEST_F(TableStepsTest, HostilePayloadValuesStayBound) {
  CreateDocs();
  const auto source_before = Dump(src_, "kb_doc", "id");
  auto by_kind = Sync("kind = :kind");

  FakeContext none(ds_, {{"kind", "1 OR 1=1"}});
  StepResult r = by_kind->Execute(none);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["rows"], 0);

  // Matches exactly the one row whose kind is that text.
  FakeContext exact(ds_, {{"kind", "x'; DROP TABLE kb_doc; --"}}, "EV-2#0");
  r = by_kind->Execute(exact);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["rows"], 1);
  EXPECT_EQ(tgt_.QueryInt("SELECT id FROM kb_doc"), 4);

  // A string compared with an integer column must be an integer: MySQL would read
  // "1 OR 1=1" as 1 and match space 1.
  auto by_space = Sync("space_id = :space_id");
  FakeContext numeric(ds_, {{"space_id", "1 OR 1=1"}}, "EV-3#0");
  r = by_space->Execute(numeric);
  EXPECT_EQ(r.kind, StepResult::Kind::kPermanent);
  EXPECT_NE(r.error.find("payload field 'space_id' must be an integer"), std::string::npos) << r.error;
  FakeContext as_text(ds_, {{"space_id", "2"}}, "EV-4#0");
  r = by_space->Execute(as_text);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["rows"], 1);

  EXPECT_EQ(Dump(src_, "kb_doc", "id"), source_before);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc"), 2);
}

TEST_F(TableStepsTest, SyncsManyRowsInChunksWithACompositeKey) {
  const char* ddl = R"(
    CREATE TABLE kv (
      tenant VARCHAR(16) NOT NULL, seq INT NOT NULL, grp INT NOT NULL,
      val VARBINARY(64) NULL, note VARCHAR(100) NULL, at DATETIME(6) NULL,
      PRIMARY KEY (tenant, seq)
    ) DEFAULT CHARSET=utf8mb4)";
  CreateInBoth(ddl);
  src_.Exec(
      "INSERT INTO kv SELECT CONCAT('t', seq % 7), seq, 7, UNHEX(SHA2(seq, 256)), "
      "CONCAT('note \xF0\x9F\x98\x80 ', seq), '2024-01-01 00:00:00' + INTERVAL seq MICROSECOND "
      "FROM seq_0_to_2344");
  src_.Exec("INSERT INTO kv SELECT 'other', seq, 8, NULL, NULL, NULL FROM seq_0_to_99");
  // Part of it is already there, some of it stale.
  tgt_.Exec("INSERT INTO kv SELECT * FROM `" + src_.url().schema + "`.kv WHERE grp = 7 AND seq % 3 = 0");
  tgt_.Exec("UPDATE kv SET note = 'stale' WHERE seq % 9 = 0");
  const auto before = Dump(tgt_, "kv", "tenant, seq");

  auto step = Sync("grp = :grp", {{"chunk_size", 100}}, "kv");
  FakeContext ctx(ds_, {{"grp", 7}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["rows"], 2345);
  EXPECT_EQ(r.output["updated"], 261);  // seq % 9 == 0 among 0..2344
  EXPECT_EQ(r.output["inserted"], 2345 - 782);
  EXPECT_EQ(Dump(tgt_, "kv", "tenant, seq"), Dump(src_, "kv", "tenant, seq", "grp = 7"));
  EXPECT_EQ(CrossDiff("kv", "tenant, seq", "grp,val,note,at", "a.grp = 7"), 0);

  ExpectCompensationRestores(*step, ctx, r, "kv", "tenant, seq", before);
}

TEST_F(TableStepsTest, CaseInsensitiveKeysAreRestoredExactly) {
  // 'abc' and 'ABC' are one key under a _ci collation, but different bytes: the
  // sync writes the source's bytes and compensation puts the target's back.
  CreateInBoth("CREATE TABLE tag (name VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, n INT)");
  src_.Exec("INSERT INTO tag VALUES ('abc', 1), ('new', 2)");
  tgt_.Exec("INSERT INTO tag VALUES ('ABC', 1)");
  const auto before = Dump(tgt_, "tag", "name");
  auto step = Sync("n >= :n", json::object(), "tag");
  FakeContext ctx(ds_, {{"n", 0}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Dump(tgt_, "tag", "name"), Dump(src_, "tag", "name"));
  ExpectCompensationRestores(*step, ctx, r, "tag", "name", before);
}

TEST_F(TableStepsTest, DeleteMissingMirrorsAndCompensates) {
  CreateDocs();
  tgt_.Exec(kDocRows);
  tgt_.Exec("INSERT INTO kb_doc (id, space_id, kind) VALUES (8, 1, 'gone'), (9, 1, 'gone'), (10, 2, 'keep')");
  const auto before = Dump(tgt_, "kb_doc", "id");
  auto step = Sync("space_id = :space_id", {{"delete_missing", true}, {"chunk_size", 2}});
  FakeContext ctx(ds_, {{"space_id", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["deleted"], 2);
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id", "space_id = 1"), Dump(src_, "kb_doc", "id", "space_id = 1"));
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc WHERE id = 10"), 1);
  ExpectCompensationRestores(*step, ctx, r, "kb_doc", "id", before);
}

TEST_F(TableStepsTest, DeleteAndCompensateRestoreExactly) {
  CreateDocs();
  tgt_.Exec(kDocRows);
  const auto before = Dump(tgt_, "kb_doc", "id");
  auto step = MakeTableDeleteStep(Spec(
      "table_delete", {{"target", "env_b"}, {"table", "kb_doc"}, {"where", "space_id = :space_id"}, {"chunk_size", 2}},
      "purge"));
  FakeContext ctx(ds_, {{"space_id", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output, (json{{"rows", 5}, {"deleted", 5}}));
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc"), 1);
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id"), Dump(src_, "kb_doc", "id", "space_id = 2"));

  // Re-execution after a crash finds nothing more to delete and keeps the image.
  StepResult again = step->Execute(ctx);
  ASSERT_EQ(again.kind, StepResult::Kind::kOk) << again.error;
  EXPECT_EQ(again.output["deleted"], 0);
  EXPECT_EQ((*again.compensation_data)["restore"].size(), 5u);

  StepResult c = ExpectCompensationRestores(*step, ctx, again, "kb_doc", "id", before);
  EXPECT_EQ(c.output, (json{{"removed", 0}, {"restored", 5}}));
}

TEST_F(TableStepsTest, LostOwnershipOrCancellationRollsTheTargetBack) {
  CreateDocs();
  auto step = Sync("space_id = :space_id", {{"chunk_size", 2}});
  FakeContext lost(ds_, {{"space_id", 1}});
  lost.owner = false;
  StepResult r = step->Execute(lost);
  EXPECT_EQ(r.kind, StepResult::Kind::kTransient);
  EXPECT_NE(r.error.find("lost ownership"), std::string::npos) << r.error;
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc"), 0);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk WHERE chunk_no > 0"), 0);

  FakeContext cancelled(ds_, {{"space_id", 1}});
  cancelled.stop.request_stop();
  r = step->Execute(cancelled);
  EXPECT_EQ(r.kind, StepResult::Kind::kTransient);
  EXPECT_NE(r.error.find("cancelled"), std::string::npos) << r.error;
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc"), 0);
}

TEST_F(TableStepsTest, PermanentFailures) {
  CreateDocs();
  auto step = Sync("space_id = :space_id");

  FakeContext missing(ds_, {{"kind", "doc"}});
  StepResult r = step->Execute(missing);
  EXPECT_EQ(r.kind, StepResult::Kind::kPermanent);
  EXPECT_EQ(r.error, "payload has no field 'space_id' needed by step 'docs'");

  FakeContext object(ds_, {{"space_id", {{"$gt", 0}}}});
  r = step->Execute(object);
  EXPECT_EQ(r.kind, StepResult::Kind::kPermanent);
  EXPECT_NE(r.error.find("payload field 'space_id' is an object"), std::string::npos) << r.error;

  FakeContext ok(ds_, {{"space_id", 1}});
  r = Sync("nope = :space_id")->Execute(ok);
  EXPECT_EQ(r.kind, StepResult::Kind::kPermanent);
  EXPECT_EQ(r.error, "where of step 'docs' reads column `nope`, which env_a.kb_doc does not have");

  tgt_.Exec("DROP TABLE kb_doc");
  r = step->Execute(ok);
  EXPECT_EQ(r.kind, StepResult::Kind::kPermanent);
  EXPECT_EQ(r.error, "table env_b.kb_doc does not exist");

  CreateInBoth("CREATE TABLE no_pk (a INT, b INT)");
  r = Sync("a = :space_id", json::object(), "no_pk")->Execute(ok);
  EXPECT_EQ(r.kind, StepResult::Kind::kPermanent);
  EXPECT_EQ(r.error, "table env_b.no_pk has no primary key");

  json unknown = {{"source", "env_a"}, {"target", "env_c"}, {"table", "kb_doc"}, {"where", "1 = 1"}};
  r = MakeTableSyncStep(Spec("table_sync", unknown))->Execute(ok);
  EXPECT_EQ(r.kind, StepResult::Kind::kPermanent);
  EXPECT_NE(r.error.find("unknown datasource 'env_c'"), std::string::npos) << r.error;
}

// Issue 13: a 200k-row table whose target holds a different, older copy (every row
// older, some missing, some only on the target) syncs chunk by chunk, and its
// compensation restores the target byte for byte.
TEST_F(TableStepsTest, LargeTableIntoAnOlderCopySyncsAndCompensatesExactly) {
  const char* ddl =
      "CREATE TABLE big (id INT PRIMARY KEY, grp INT NOT NULL, name VARCHAR(40), at DATETIME(3), "
      "n DECIMAL(12,2)) DEFAULT CHARSET=utf8mb4";
  CreateInBoth(ddl);
  src_.Exec("INSERT INTO big SELECT seq, 1, CONCAT('name ', seq), '2025-01-01' + INTERVAL seq SECOND, seq / 100 "
            "FROM seq_1_to_200000");
  tgt_.Exec("INSERT INTO big SELECT seq, 1, CONCAT('old ', seq), '2024-01-01' + INTERVAL seq SECOND, NULL "
            "FROM seq_1_to_200000 WHERE seq % 10 <> 3");
  tgt_.Exec("INSERT INTO big SELECT seq, 1, 'target only', NULL, 1 FROM seq_200001_to_200100");
  const auto before = Dump(tgt_, "big", "id");
  auto step = Sync("grp = :g", json::object(), "big");
  FakeContext ctx(ds_, {{"g", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 200000}, {"inserted", 20000}, {"updated", 180000}, {"unchanged", 0}}));
  EXPECT_GT(r.output["chunk_records"].get<int>(), 10);  // committed chunk by chunk
  // A reference and the table's shape only, never the image.
  EXPECT_LT(r.compensation_data->dump().size(), 600u) << r.compensation_data->dump();
  EXPECT_EQ(Dump(tgt_, "big", "id", "id <= 200000"), Dump(src_, "big", "id"));
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM big WHERE name = 'target only'"), 100);

  StepResult c = ExpectCompensationRestores(*step, ctx, r, "big", "id", before);
  EXPECT_EQ(c.output["removed"], 20000);
  EXPECT_EQ(c.output["restored"], 180000);
}

// Issue 13 item 2: the checksum diff sees each kind of single-row difference that
// collations and text conversions hide, and reads and writes only those chunks.
TEST_F(TableStepsTest, ChecksumDiffFindsEveryKindOfDifferenceAndCopiesOnlyThoseChunks) {
  const char* ddl = R"(
    CREATE TABLE d (
      id INT PRIMARY KEY,
      ci VARCHAR(20) COLLATE utf8mb4_general_ci NULL,
      pad VARCHAR(20) COLLATE utf8mb4_bin NULL,
      bin VARBINARY(8) NULL,
      at DATETIME(6) NULL,
      x DOUBLE NULL
    ) DEFAULT CHARSET=utf8mb4)";
  CreateInBoth(ddl);
  src_.Exec("INSERT INTO d SELECT seq, 'a', 'x', 0x0102, '2024-01-01 00:00:00.123456', 0.1e0 + 0.2e0 "
            "FROM seq_1_to_1000");
  tgt_.Exec("INSERT INTO d SELECT * FROM `" + src_.url().schema + "`.d");
  // One difference per chunk of 100 rows, each of another kind (chunk 10 two); chunks 3
  // and 6 stay equal.
  src_.Exec("UPDATE d SET ci = NULL WHERE id = 50");      // NULL vs 'a'...
  tgt_.Exec("UPDATE d SET ci = '' WHERE id = 50");        // ... target '': NULL vs ''
  src_.Exec("UPDATE d SET ci = 'NULL' WHERE id = 150");   // the string 'NULL' vs NULL
  tgt_.Exec("UPDATE d SET ci = NULL WHERE id = 150");
  tgt_.Exec("UPDATE d SET ci = 'A' WHERE id = 350");      // case only, under a _ci collation
  tgt_.Exec("UPDATE d SET pad = 'x ' WHERE id = 450");    // trailing space only
  tgt_.Exec("UPDATE d SET bin = 0x0103 WHERE id = 750");  // one binary byte
  tgt_.Exec("UPDATE d SET at = '2024-01-01 00:00:00.123457' WHERE id = 850");  // one microsecond
  tgt_.Exec("UPDATE d SET x = 0.3e0 WHERE id = 950");     // the last bit of a double
  src_.Exec("UPDATE d SET ci = 'a|', pad = 'b' WHERE id = 650");  // a separator moved from
  tgt_.Exec("UPDATE d SET ci = 'a', pad = '|b' WHERE id = 650");  // one column to the next
  src_.Exec("UPDATE d SET ci = NULL, pad = 'a' WHERE id = 960");  // a NULL moved from one
  tgt_.Exec("UPDATE d SET ci = 'a', pad = NULL WHERE id = 960");  // column to the next
  ASSERT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM d WHERE x = 0.3e0"), 1);
  ASSERT_NE(Dump(tgt_, "d", "id"), Dump(src_, "d", "id"));

  // Compare chunks of 100 rows: 4x chunk_size.
  auto step = Sync("1 = 1", {{"chunk_size", 25}}, "d");
  FakeContext ctx(ds_, json::object());
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 1000}, {"inserted", 0}, {"updated", 9}, {"unchanged", 991}}));
  EXPECT_EQ(r.output["chunks"], 11);  // 10 of 100 rows, and the empty range after the last key
  EXPECT_EQ(r.output["chunks_equal"], 3);
  EXPECT_EQ(r.output["chunks_written"], 8);
  EXPECT_EQ(r.output["rows_fetched"], 9);  // only the differing rows were read whole
  EXPECT_EQ(Dump(tgt_, "d", "id"), Dump(src_, "d", "id"));

  // Nothing differs any more: a re-sync (another event) reads no row.
  StepResult r2 = RunAsAnotherEvent(*step, json::object());
  // (Compared by key span, table::KeySpanRanges: the range reaching the highest key
  // is the last, open above, so no empty range follows it.)
  EXPECT_EQ(r2.output["chunks"], 10);
  EXPECT_EQ(r2.output["chunks_equal"], 10);
  EXPECT_EQ(r2.output["rows_fetched"], 0);
}

// Compare ranges by key span follow the key density: sparse keys (one in 1000), then a
// dense run, then a gap. A range sized for the sparse keys that lands in the dense run
// and differs there holds far more rows than a compare chunk covers: it is taken
// again, shorter, so the differing rows are found with at most a chunk's row hashes.
TEST_F(TableStepsTest, KeySpanCompareRangesFollowSparseAndDenseKeys) {
  CreateInBoth("CREATE TABLE ks (id BIGINT PRIMARY KEY, v VARCHAR(20) NOT NULL)");
  src_.Exec("INSERT INTO ks SELECT seq * 1000, 'sparse' FROM seq_1_to_1000");
  src_.Exec("INSERT INTO ks SELECT 2000000 + seq, 'dense' FROM seq_1_to_20000");
  src_.Exec("INSERT INTO ks SELECT 9000000000 + seq * 7, 'far' FROM seq_1_to_300");
  tgt_.Exec("INSERT INTO ks SELECT * FROM `" + src_.url().schema + "`.ks");
  tgt_.Exec("UPDATE ks SET v = 'old' WHERE id IN (5000, 2000001, 2010000, 2019999, 9000000007)");
  tgt_.Exec("DELETE FROM ks WHERE id = 2015000");
  tgt_.Exec("INSERT INTO ks VALUES (2500000, 'target only')");  // in a gap: kept (no delete_missing)
  auto step = Sync("1 = 1", {{"chunk_size", 25}, {"lanes", 1}}, "ks");
  FakeContext ctx(ds_, json::object());
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 21300}, {"inserted", 1}, {"updated", 5}, {"unchanged", 21294}}));
  EXPECT_EQ(r.output["rows_fetched"], 6);  // only the differing rows were read whole
  EXPECT_EQ(Dump(tgt_, "ks", "id", "id <> 2500000"), Dump(src_, "ks", "id"));
  // The records follow in key order, and the last range is open above.
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk c JOIN dsync_sync_chunk p "
                          "ON p.step_code = c.step_code AND p.chunk_no = c.chunk_no - 1 "
                          "WHERE c.step_code = 'EV-1#0' AND c.chunk_no > 1 AND "
                          "CAST(JSON_VALUE(c.lo_key, '$[0]') AS SIGNED) < CAST(JSON_VALUE(p.hi_key, '$[0]') AS SIGNED)"),
            0);
  EXPECT_EQ(tgt_.QueryInt("SELECT hi_key IS NULL FROM dsync_sync_chunk WHERE step_code = 'EV-1#0' "
                          "ORDER BY chunk_no DESC LIMIT 1"),
            1);

  StepResult r2 = RunAsAnotherEvent(*step, json::object());
  // Every range equal but the one holding the target-only row (no delete_missing).
  EXPECT_EQ(r2.output["chunks_equal"].get<int>(), r2.output["chunks"].get<int>() - 1);
  EXPECT_EQ(r2.output["rows_fetched"], 0);
  // A few ranges over 9 billion keys, not one per compare chunk of keys.
  EXPECT_LT(r2.output["chunks"].get<int>(), 400);
}

// Integer columns are read as numbers (a ZEROFILL column's CAST gives '000042'): a
// ZEROFILL key and BIGINT UNSIGNED values near 2^64 are split into lanes, checkpointed,
// compared by key span and restored exactly.
TEST_F(TableStepsTest, ZerofillIntegerKeysSyncInLanesAndCompensateExactly) {
  CreateInBoth("CREATE TABLE zf (id INT(8) ZEROFILL PRIMARY KEY, v INT(4) ZEROFILL, u BIGINT UNSIGNED)");
  src_.Exec("INSERT INTO zf SELECT seq, seq % 1000, 18446744073709551615 - seq FROM seq_1_to_50000");
  tgt_.Exec("INSERT INTO zf SELECT seq, seq % 7, 18446744073709551615 - seq FROM seq_1_to_50000 WHERE seq % 9 <> 4");
  const auto before = Dump(tgt_, "zf", "id");
  auto step = Sync("1 = 1", {{"chunk_size", 1000}}, "zf");
  FakeContext ctx(ds_, json::object());
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["lanes"], 2);
  EXPECT_EQ(tgt_.QueryInt(R"(SELECT hi_key = '[["25000"]]' FROM dsync_sync_chunk WHERE chunk_no = 0)"), 1);
  EXPECT_EQ(r.output["inserted"], 50000 / 9 + 1);
  EXPECT_EQ(Dump(tgt_, "zf", "id"), Dump(src_, "zf", "id"));

  StepResult r2 = RunAsAnotherEvent(*step, json::object());
  EXPECT_EQ(r2.output["unchanged"], 50000);
  EXPECT_EQ(r2.output["rows_fetched"], 0);

  ExpectCompensationRestores(*step, ctx, r, "zf", "id", before);
}

// A source row whose key the target lacks but whose secondary unique value another
// target row holds: an upsert would rewrite that other row (id 1 -> 2), which no
// before-image holds, so compensation could never bring it back. The chunk fails
// permanently naming the clash and writes nothing; the rows the target does hold are
// still updated in place when nothing clashes.
TEST_F(TableStepsTest, AClashOnASecondaryUniqueKeyFailsAndTouchesNoOtherRow) {
  CreateInBoth("CREATE TABLE u (id INT PRIMARY KEY, email VARCHAR(40) NOT NULL, v VARCHAR(10), UNIQUE KEY uk_email (email))");
  src_.Exec("INSERT INTO u VALUES (2, 'ann@x', 'new'), (3, 'bob@x', 'new')");
  tgt_.Exec("INSERT INTO u VALUES (1, 'ann@x', 'old'), (3, 'bob@x', 'old')");
  const auto before = Dump(tgt_, "u", "id");
  auto step = Sync("1 = 1", json::object(), "u");
  FakeContext ctx(ds_, json::object());
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kPermanent) << r.error;
  EXPECT_NE(r.error.find("step 'docs': a row clashes with another row of env_b.u over a unique key"),
            std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("uk_email"), std::string::npos) << r.error;
  EXPECT_EQ(Dump(tgt_, "u", "id"), before);  // row 1 is still there, row 3 still old

  // Without the clash the same step syncs: 2 inserted, 3 updated, 1 left alone.
  tgt_.Exec("UPDATE u SET email = 'ann@old' WHERE id = 1");
  r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["inserted"], 1);
  EXPECT_EQ(r.output["updated"], 1);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM u WHERE id = 1 AND email = 'ann@old' AND v = 'old'"), 1);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM u WHERE id IN (2, 3) AND v = 'new'"), 2);
}

// Compensation restores a row the sync deleted (delete_missing) by inserting it: when
// a row written since holds its unique value, compensation fails naming the key and
// restores nothing, where an upsert would have turned that other row into the
// restored one (id 5 -> 1, its data gone).
TEST_F(TableStepsTest, CompensationDoesNotOverwriteARowThatTookARestoredUniqueValue) {
  CreateInBoth("CREATE TABLE u (id INT PRIMARY KEY, email VARCHAR(40) NOT NULL, v VARCHAR(10), UNIQUE KEY uk_email (email))");
  src_.Exec("INSERT INTO u VALUES (3, 'bob@x', 'new')");
  tgt_.Exec("INSERT INTO u VALUES (1, 'ann@x', 'old'), (3, 'bob@x', 'old')");
  const auto before = Dump(tgt_, "u", "id");
  auto step = Sync("1 = 1", {{"delete_missing", true}}, "u");
  FakeContext ctx(ds_, json::object());
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["deleted"], 1);
  tgt_.Exec("INSERT INTO u VALUES (5, 'ann@x', 'third')");  // someone else, since
  const auto written_since = Dump(tgt_, "u", "id");

  ctx.compensation = *r.compensation_data;
  StepResult c = step->Compensate(ctx);
  ASSERT_EQ(c.kind, StepResult::Kind::kPermanent) << c.error;
  EXPECT_NE(c.error.find("a row clashes with another row of env_b.u over a unique key"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("uk_email"), std::string::npos) << c.error;
  EXPECT_EQ(Dump(tgt_, "u", "id"), written_since);  // row 5 kept, nothing restored

  // Once that row is gone, compensation restores the before-image exactly.
  tgt_.Exec("DELETE FROM u WHERE id = 5");
  ExpectCompensationRestores(*step, ctx, r, "u", "id", before);
}

// Rows changed by the same bit pattern at the same place (n: 2 -> 3 in two rows of
// equal length) cancel in a plain BIT_XOR of CRC32s; the range checksum still sees them.
TEST_F(TableStepsTest, ChecksumSeesIdenticalChangesInPairs) {
  CreateInBoth("CREATE TABLE p (id INT PRIMARY KEY, n INT)");
  src_.Exec("INSERT INTO p VALUES (10, 3), (11, 3), (12, 5), (13, 5)");
  tgt_.Exec("INSERT INTO p VALUES (10, 2), (11, 2), (12, 4), (13, 4)");
  auto step = Sync("1 = 1", json::object(), "p");
  FakeContext ctx(ds_, json::object());
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["updated"], 4);
  EXPECT_EQ(Dump(tgt_, "p", "id"), Dump(src_, "p", "id"));
}

// An entity filter pins its integer column ("grp = :g", "AND n = 5"): the compare form
// leaves it out (ColumnSet's PinCompareHash), and every difference the filter lets
// through is still found: a changed value in a pinned row, a target row moved out of
// the filter (the source's row is then missing there), a row only one side has;
// rows outside the filter stay as they are. The key is pinned too in "id = :id".
TEST_F(TableStepsTest, ColumnsPinnedByTheFilterStillSeeEveryDifference) {
  CreateInBoth("CREATE TABLE pin (id INT PRIMARY KEY, grp INT NOT NULL, n INT NOT NULL, v VARCHAR(20) NULL)");
  src_.Exec("INSERT INTO pin SELECT seq, seq % 3, 5, CONCAT('v', seq) FROM seq_1_to_600");
  tgt_.Exec("INSERT INTO pin SELECT * FROM `" + src_.url().schema + "`.pin");
  tgt_.Exec("UPDATE pin SET v = 'changed' WHERE id = 10");  // grp 1: found
  tgt_.Exec("UPDATE pin SET grp = 2 WHERE id = 100");       // moved out of grp 1 on the target
  tgt_.Exec("UPDATE pin SET v = NULL WHERE id = 301");      // grp 1: NULL vs 'v301'
  tgt_.Exec("UPDATE pin SET n = 6 WHERE id = 400");         // out of "n = 5" on the target
  tgt_.Exec("DELETE FROM pin WHERE id = 499");              // grp 1 row missing on the target
  tgt_.Exec("UPDATE pin SET v = 'other' WHERE id = 200");   // grp 2: outside the filter, kept
  const std::string untouched = "grp <> 1 AND id NOT IN (100, 400)";
  const auto outside = Dump(tgt_, "pin", "id", untouched);

  auto step = Sync("grp = :g AND n = 5", {{"chunk_size", 25}}, "pin");
  FakeContext ctx(ds_, json{{"g", 1}});
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 200}, {"inserted", 1}, {"updated", 4}, {"unchanged", 195}}));
  EXPECT_EQ(r.output["rows_fetched"], 5);
  EXPECT_EQ(Dump(tgt_, "pin", "id", "grp = 1"), Dump(src_, "pin", "id", "grp = 1"));
  EXPECT_EQ(Dump(tgt_, "pin", "id", untouched), outside);
  // Nothing in the filter differs any more; a re-sync reads no row.
  StepResult r2 = RunAsAnotherEvent(*step, json{{"g", 1}});
  EXPECT_EQ(r2.output["rows_fetched"], 0);
  EXPECT_EQ(r2.output["unchanged"], 200);

  // The key pinned: one row, found different, then equal.
  tgt_.Exec("UPDATE pin SET v = 'again' WHERE id = 7");
  auto by_id = Sync("id = :id", json::object(), "pin");
  FakeContext third(ds_, json{{"id", 7}}, "EV-3#0");
  StepResult r3 = by_id->Execute(third);
  ASSERT_EQ(r3.kind, StepResult::Kind::kOk) << r3.error;
  EXPECT_EQ(r3.output["updated"], 1) << r3.output.dump();
  EXPECT_EQ(Dump(tgt_, "pin", "id", "id = 7"), Dump(src_, "pin", "id", "id = 7"));
}

// Issue 13 item 3: customer -> orders -> order items as one saga's three steps, the
// children selected through their parents, compensated in reverse.
TEST_F(TableStepsTest, SubqueryFilterSyncsAnEntityGraphAndCompensatesIt) {
  for (TestSchema* db : {&src_, &tgt_}) {
    db->Exec("CREATE TABLE customer (id INT PRIMARY KEY, name VARCHAR(40))");
    db->Exec("CREATE TABLE orders (id INT PRIMARY KEY, customer_id INT NOT NULL, total DECIMAL(10,2), KEY (customer_id))");
    db->Exec("CREATE TABLE order_item (id INT PRIMARY KEY, order_id INT NOT NULL, sku VARCHAR(20), qty INT, KEY (order_id))");
  }
  src_.Exec("INSERT INTO customer VALUES (1, 'ann'), (2, 'bob')");
  src_.Exec("INSERT INTO orders SELECT seq, 1 + seq % 2, seq * 1.5 FROM seq_1_to_40");  // even ids: ann's
  src_.Exec("INSERT INTO order_item SELECT seq, 1 + seq % 40, CONCAT('sku', seq), seq % 7 FROM seq_1_to_400");
  // The target: an older state of customer 1 (one order's items differ, one item is
  // gone from the source), and bob.
  tgt_.Exec("INSERT INTO customer VALUES (1, 'ann (old)'), (2, 'bob')");
  tgt_.Exec("INSERT INTO orders SELECT * FROM `" + src_.url().schema + "`.orders WHERE id <= 20");
  tgt_.Exec("INSERT INTO order_item SELECT * FROM `" + src_.url().schema + "`.order_item WHERE id <= 200");
  tgt_.Exec("UPDATE order_item SET qty = 99 WHERE order_id = 4");
  tgt_.Exec("INSERT INTO order_item VALUES (1000, 4, 'gone', 1)");
  const std::vector<std::string> tables = {"customer", "orders", "order_item"};
  std::map<std::string, std::vector<std::string>> before;
  for (const auto& t : tables) before[t] = Dump(tgt_, t, "id");

  std::vector<std::unique_ptr<StepHandler>> steps;
  steps.push_back(Sync("id = :cid", json::object(), "customer"));
  steps.push_back(Sync("customer_id = :cid", json::object(), "orders"));
  steps.push_back(MakeTableSyncStep(Spec(
      "table_sync",
      {{"source", "env_a"}, {"target", "env_b"}, {"table", "order_item"}, {"delete_missing", true},
       {"where", "order_id IN (SELECT id FROM orders WHERE customer_id = :cid)"}, {"chunk_size", 50}},
      "items")));
  std::vector<std::unique_ptr<FakeContext>> ctxs;
  for (size_t i = 0; i < steps.size(); ++i) {
    ctxs.push_back(std::make_unique<FakeContext>(ds_, json{{"cid", 1}}, "EV-G#" + std::to_string(i)));
    StepResult r = steps[i]->Execute(*ctxs[i]);
    ASSERT_EQ(r.kind, StepResult::Kind::kOk) << tables[i] << ": " << r.error;
    ctxs[i]->compensation = *r.compensation_data;
    if (i == 2) {
      EXPECT_EQ(r.output["rows"], 200);  // 20 orders of customer 1, 10 items each
      EXPECT_EQ(r.output["deleted"], 1);
    }
  }
  const std::string items_of_1 = "order_id IN (SELECT id FROM orders WHERE customer_id = 1)";
  EXPECT_EQ(Dump(tgt_, "customer", "id", "id = 1"), Dump(src_, "customer", "id", "id = 1"));
  EXPECT_EQ(Dump(tgt_, "orders", "id", "customer_id = 1"), Dump(src_, "orders", "id", "customer_id = 1"));
  EXPECT_EQ(Dump(tgt_, "order_item", "id", items_of_1), Dump(src_, "order_item", "id", items_of_1));
  EXPECT_EQ(Dump(tgt_, "customer", "id", "id = 2"), Dump(src_, "customer", "id", "id = 2"));  // untouched
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM order_item WHERE order_id IN (SELECT id FROM orders WHERE "
                          "customer_id = 2) AND id > 200"),
            0);  // bob's newer items were not synced

  // Compensation in reverse: items, orders, customer.
  for (size_t i = steps.size(); i-- > 0;) {
    StepResult c = steps[i]->Compensate(*ctxs[i]);
    ASSERT_EQ(c.kind, StepResult::Kind::kOk) << tables[i] << ": " << c.error;
  }
  for (const auto& t : tables) EXPECT_EQ(Dump(tgt_, t, "id"), before[t]) << t;

  // A hostile value for the subquery's integer column stays a value: refused.
  FakeContext hostile(ds_, json{{"cid", "1 OR 1=1"}}, "EV-H#2");
  StepResult h = steps[2]->Execute(hostile);
  EXPECT_EQ(h.kind, StepResult::Kind::kPermanent);
  EXPECT_NE(h.error.find("payload field 'cid' must be an integer (column `customer_id` of env_a.orders)"),
            std::string::npos)
      << h.error;
  FakeContext text(ds_, json{{"cid", "x') OR ('1'='1"}}, "EV-H2#2");
  EXPECT_EQ(steps[2]->Execute(text).kind, StepResult::Kind::kPermanent);
  EXPECT_EQ(Dump(tgt_, "order_item", "id"), before["order_item"]);

  // A subquery table the source lacks: a clear permanent failure.
  auto missing = MakeTableSyncStep(Spec("table_sync", {{"source", "env_a"}, {"target", "env_b"}, {"table", "orders"},
                                                       {"where", "customer_id IN (SELECT id FROM nope)"}}));
  FakeContext m(ds_, json::object(), "EV-M#0");
  StepResult mr = missing->Execute(m);
  EXPECT_EQ(mr.kind, StepResult::Kind::kPermanent);
  EXPECT_EQ(mr.error, "table env_a.nope (read by the where of step 'docs') does not exist");
}

// Issue 14 item 4: a production write to a synced row between the sync and its
// compensation is a conflict. fail: nothing is restored and the keys are named;
// skip: those rows are left as production wrote them and the rest are restored;
// overwrite: everything is restored (the behaviour before conflict checks).
class ConflictTest : public TableStepsTest {
 protected:
  // Syncs space 1 with a step_ of the `extra` params into a target holding an older
  // copy (ids 1, 3 updated; 2, 4 inserted), then production writes: id 1 updated, id 2
  // (inserted by the sync) deleted, id 5 (never synced) updated. Then compensates;
  // returns the compensation's result.
  StepResult SyncWriteAndCompensate(const json& extra) {
    step_ = Sync("space_id = :space_id", extra);
    CreateDocs();
    tgt_.Exec(kDocRows);
    tgt_.Exec("UPDATE kb_doc SET title = 'old' WHERE id IN (1, 3)");
    tgt_.Exec("DELETE FROM kb_doc WHERE id IN (2, 4)");
    before_but_5_ = Dump(tgt_, "kb_doc", "id", "id <> 5");
    before_36_ = Dump(tgt_, "kb_doc", "id", "id IN (3, 4, 6)");
    StepResult r = step_->Execute(ctx_);
    EXPECT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
    EXPECT_EQ(Classic(r.output), (json{{"rows", 5}, {"inserted", 2}, {"updated", 2}, {"unchanged", 1}}));
    tgt_.Exec("UPDATE kb_doc SET title = 'production' WHERE id = 1");
    tgt_.Exec("DELETE FROM kb_doc WHERE id = 2");
    tgt_.Exec("UPDATE kb_doc SET title = 'production too' WHERE id = 5");
    after_writes_ = Dump(tgt_, "kb_doc", "id");
    ctx_.compensation = *r.compensation_data;
    return step_->Compensate(ctx_);
  }
  std::unique_ptr<StepHandler> step_;
  FakeContext ctx_{ds_, {{"space_id", 1}}};
  std::vector<std::string> before_but_5_, before_36_, after_writes_;
};

TEST_F(ConflictTest, FailRefusesNamingTheKeysAndRestoresNothing) {
  StepResult c = SyncWriteAndCompensate({{"chunk_size", 2}});  // several chunks
  ASSERT_EQ(c.kind, StepResult::Kind::kPermanent);
  EXPECT_EQ(c.error, "step 'docs': compensation refused (on_conflict fail): 2 row(s) of env_b.kb_doc changed since "
                     "the sync wrote them, keys [\"1\"], [\"2\"]");
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id"), after_writes_);  // not one row restored
  ASSERT_FALSE(ctx_.progress.empty());
  EXPECT_EQ(ctx_.progress.back(), (json{{"compensation", "refused"}, {"on_conflict", "fail"}, {"conflicts", 2},
                                        {"conflict_keys", {{"1"}, {"2"}}}}));
  // Repeated (the engine does not, but an operator might retry): the same refusal.
  EXPECT_EQ(step_->Compensate(ctx_).error, c.error);
}

TEST_F(ConflictTest, SkipLeavesConflictingRowsAndRestoresTheRest) {
  StepResult c = SyncWriteAndCompensate({{"on_conflict", "skip"}});
  ASSERT_EQ(c.kind, StepResult::Kind::kOk) << c.error;
  EXPECT_EQ(c.output, (json{{"chunks", 1}, {"removed", 1}, {"restored", 1}, {"on_conflict", "skip"},
                            {"conflicts", 2}, {"skipped_keys", {{"1"}, {"2"}}}}));
  EXPECT_EQ(ctx_.progress.back(), c.output);  // recorded as the step row's output
  // id 1 keeps production's write, id 2 stays deleted by production; id 3 and 4 are
  // restored (3 updated back, 4 removed); 5 and 6 were not the sync's.
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc WHERE id = 1 AND title = 'production'"), 1);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc WHERE id = 2"), 0);
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id", "id IN (3, 4, 6)"), before_36_);
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id", "id = 5"), Dump(tgt_, "kb_doc", "id", "title = 'production too'"));
}

TEST_F(ConflictTest, OverwriteRestoresEverything) {
  StepResult c = SyncWriteAndCompensate({{"on_conflict", "overwrite"}});
  ASSERT_EQ(c.kind, StepResult::Kind::kOk) << c.error;
  EXPECT_EQ(c.output, (json{{"chunks", 1}, {"removed", 2}, {"restored", 2}, {"on_conflict", "overwrite"},
                            {"conflicts", 0}}));
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id", "id <> 5"), before_but_5_);
}

TEST_F(ConflictTest, BadOnConflictIsRefusedAtStart) {
  EXPECT_THROW(Sync("1 = 1", {{"on_conflict", "ignore"}}), ConfigError);
  try {
    Sync("1 = 1", {{"on_conflict", 1}});
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "config: step 'docs' (table_sync): 'on_conflict' must be \"fail\", \"skip\" or "
                           "\"overwrite\", got 1");
  }
}

// Issue 14 item 5: a column whose type, nullability or collation differs between the
// source and the target, a listed column the target lacks, or a primary key of other
// columns fails the step before it writes anything, naming the column (or the key); a
// compensation refused later explains how the table changed since the sync.
TEST_F(TableStepsTest, SchemaPreflightFailsNamingTheColumn) {
  CreateDocs();
  FakeContext ctx(ds_, {{"space_id", 1}});
  auto step = Sync("space_id = :space_id");
  // Without a columns list a sync copies the columns both tables have (table_steps.h),
  // so a column the target lacks fails only a step that lists it.
  auto listed = Sync("space_id = :space_id", {{"columns", {"id", "space_id", "kind", "title"}}});
  struct Case {
    const char* alter;
    const char* error;
    bool with_columns = false;  // run `listed` instead of `step`
  };
  const Case cases[] = {
      {"ALTER TABLE kb_doc MODIFY title VARCHAR(100) NULL",
       "schema preflight of step 'docs': column `title` is varchar(200) NULL COLLATE utf8mb4_general_ci in "
       "env_a.kb_doc but varchar(100) NULL COLLATE utf8mb4_general_ci in env_b.kb_doc"},
      {"ALTER TABLE kb_doc MODIFY kind VARCHAR(40) NULL",
       "schema preflight of step 'docs': column `kind` is varchar(40) NOT NULL COLLATE utf8mb4_general_ci in "
       "env_a.kb_doc but varchar(40) NULL COLLATE utf8mb4_general_ci in env_b.kb_doc"},
      {"ALTER TABLE kb_doc MODIFY title VARCHAR(200) COLLATE utf8mb4_bin NULL",
       "schema preflight of step 'docs': column `title` is varchar(200) NULL COLLATE utf8mb4_general_ci in "
       "env_a.kb_doc but varchar(200) NULL COLLATE utf8mb4_bin in env_b.kb_doc"},
      {"ALTER TABLE kb_doc MODIFY price DECIMAL(30,9) NULL",
       "schema preflight of step 'docs': column `price` is decimal(30,10) NULL in env_a.kb_doc but decimal(30,9) "
       "NULL in env_b.kb_doc"},
      {"ALTER TABLE kb_doc DROP COLUMN title", "column `title` of step 'docs' is missing from env_b.kb_doc",
       /*with_columns=*/true},
      {"ALTER TABLE kb_doc DROP PRIMARY KEY, ADD PRIMARY KEY (id, space_id)",
       "schema preflight of step 'docs': the primary key is (`id`) in env_a.kb_doc but (`id`, `space_id`) in "
       "env_b.kb_doc"},
  };
  for (const Case& k : cases) {
    tgt_.Exec("DROP TABLE kb_doc");
    tgt_.Exec(kDocTable);
    tgt_.Exec(k.alter);
    StepResult r = (k.with_columns ? listed : step)->Execute(ctx);
    EXPECT_EQ(r.kind, StepResult::Kind::kPermanent) << k.alter;
    EXPECT_EQ(r.error, k.error);
    EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc"), 0) << k.alter;
    EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk WHERE chunk_no > 0"), 0) << k.alter;
  }
  // Equal schemas: the sync runs and its output and compensation data carry the
  // target's fingerprint; the column is then widened and a row changed by hand.
  tgt_.Exec("DROP TABLE kb_doc");
  tgt_.Exec(kDocTable);
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  const std::string fingerprint = r.output["schema_fingerprint"];
  EXPECT_EQ(fingerprint.size(), 16u);
  EXPECT_EQ((*r.compensation_data)["schema_fingerprint"], fingerprint);
  tgt_.Exec("ALTER TABLE kb_doc MODIFY title VARCHAR(300) NULL");
  tgt_.Exec("UPDATE kb_doc SET title = 'by hand' WHERE id = 6");
  ctx.compensation = *r.compensation_data;
  StepResult c = step->Compensate(ctx);
  ASSERT_EQ(c.kind, StepResult::Kind::kPermanent);
  EXPECT_NE(c.error.find("keys [\"6\"]; the schema of env_b.kb_doc changed since the sync (fingerprint " +
                         fingerprint + ", now "),
            std::string::npos)
      << c.error;
  EXPECT_NE(c.error.find("): column `title` was varchar(200) NULL COLLATE utf8mb4_general_ci, now varchar(300) NULL "
                         "COLLATE utf8mb4_general_ci"),
            std::string::npos)
      << c.error;
}

// Issue 13: the target-side fencing token. A run of an older claim that goes on after
// a later claim took the step over (a frozen owner resumed) commits no further chunk:
// its next chunk transaction finds the token raised and rolls back, so every chunk of
// the old claim precedes every chunk of the new one.
TEST_F(TableStepsTest, AStaleOwnerCommitsNoChunkAfterALaterClaimTookOver) {
  CreateInBoth(kNumberedTable);
  src_.Exec("INSERT INTO n SELECT seq, CONCAT('v', seq), 1 FROM seq_1_to_3000");
  auto step = Sync("g = :g", {{"chunk_size", 100}}, "n");
  FakeContext stale(ds_, {{"g", 1}});
  FakeContext later(ds_, {{"g", 1}});
  later.attempt_no = 2;
  std::future<StepResult> taken;
  // At its 3rd chunk's ownership check (inside that chunk's transaction: the stale
  // owner still believes it owns the event), the later claim starts on another
  // thread; its takeover waits for the step lock, then raises the token.
  stale.on_owner_check = [&](int n) {
    if (n != 3) return;
    taken = std::async(std::launch::async, [&] {
      StepResult r = step->Execute(later);
      for (int i = 0; i < 3 && r.kind == StepResult::Kind::kTransient; ++i) r = step->Execute(later);
      return r;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  };
  StepResult s = step->Execute(stale);
  ASSERT_TRUE(taken.valid());
  StepResult l = taken.get();
  EXPECT_EQ(s.kind, StepResult::Kind::kTransient);
  EXPECT_NE(s.error.find("was taken over by a later claim of the event (attempt 2, this run's 1)"), std::string::npos)
      << s.error;
  ASSERT_EQ(l.kind, StepResult::Kind::kOk) << l.error;
  const int64_t old_chunks = tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk WHERE chunk_no > 0 AND attempt = 1");
  EXPECT_GE(old_chunks, 3);
  EXPECT_EQ(tgt_.QueryInt("SELECT MAX(chunk_no) FROM dsync_sync_chunk WHERE chunk_no > 0 AND attempt = 1") + 1,
            tgt_.QueryInt("SELECT MIN(chunk_no) FROM dsync_sync_chunk WHERE chunk_no > 0 AND attempt = 2"));
  EXPECT_EQ(tgt_.QueryInt("SELECT SUM(rows_read) FROM dsync_sync_chunk WHERE chunk_no > 0"), 3000);
  EXPECT_EQ(Dump(tgt_, "n", "id"), Dump(src_, "n", "id"));
  // The stale owner, going on, still writes nothing.
  EXPECT_EQ(step->Execute(stale).kind, StepResult::Kind::kTransient);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM dsync_sync_chunk WHERE chunk_no > 0 AND attempt = 1"), old_chunks);
}

// ---------------------------------------------------------------------------
// Issue 34 item 6: no write path from a payload.

// A payload value bound as a LIKE pattern matches literally: "%" deletes (or syncs)
// only a row holding "%", "im_" does not match "img". A step whose config says
// "like_patterns": true takes the value as the pattern it is.
TEST_F(TableStepsTest, PayloadValuesBoundIntoLikeMatchLiterally) {
  CreateDocs();
  tgt_.Exec(kDocRows);
  tgt_.Exec("INSERT INTO kb_doc (id, space_id, kind) VALUES (7, 1, '%'), (8, 1, 'a!b_c\\\\d')");
  auto del = [&](json extra) {
    json p = {{"target", "env_b"}, {"table", "kb_doc"}, {"where", "kind LIKE :k"}};
    p.update(extra);
    return MakeTableDeleteStep(Spec("table_delete", p, "purge"));
  };
  auto literal = del(json::object());
  for (const char* pattern : {"im_", "d%", "_", "a!b%"}) {
    FakeContext ctx(ds_, {{"k", pattern}}, std::string("EV-") + pattern + "#0");
    StepResult r = literal->Execute(ctx);
    ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
    EXPECT_EQ(r.output["deleted"], 0) << pattern;
  }
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc"), 8);
  FakeContext percent(ds_, {{"k", "%"}}, "EV-pct#0");
  StepResult r = literal->Execute(percent);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["deleted"], 1);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc WHERE kind = '%'"), 0);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc"), 7);
  // '!', '_' and a backslash inside a value are literal too.
  FakeContext odd(ds_, {{"k", "a!b_c\\d"}}, "EV-odd#0");
  r = literal->Execute(odd);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["deleted"], 1);

  // table_sync binds the same way: "%" matches no source row.
  FakeContext sync_ctx(ds_, {{"k", "%"}}, "EV-sync#0");
  r = Sync("kind LIKE :k")->Execute(sync_ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["rows"], 0);

  // Opted in: the value is a pattern.
  FakeContext docs(ds_, {{"k", "d%"}}, "EV-docs#0");
  r = del({{"like_patterns", true}})->Execute(docs);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["deleted"], 4);
  EXPECT_THROW(del({{"like_patterns", "yes"}}), ConfigError);
}

// table_delete refuses a filter matching more rows than max_rows: permanent, one line
// naming the count and the ceiling, nothing deleted.
TEST_F(TableStepsTest, DeleteRefusesPastItsRowCeiling) {
  CreateDocs();
  tgt_.Exec(kDocRows);
  const auto before = Dump(tgt_, "kb_doc", "id");
  auto step = [&](int max_rows) {
    return MakeTableDeleteStep(Spec("table_delete",
                                    {{"target", "env_b"}, {"table", "kb_doc"}, {"where", "space_id = :space_id"},
                                     {"chunk_size", 2}, {"max_rows", max_rows}},
                                    "purge"));
  };
  FakeContext ctx(ds_, {{"space_id", 1}});
  StepResult r = step(4)->Execute(ctx);
  EXPECT_EQ(r.kind, StepResult::Kind::kPermanent);
  EXPECT_EQ(r.error, "table_delete purge: 5 rows of env_b.kb_doc match, more than max_rows 4; nothing deleted");
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id"), before);
  r = step(5)->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(r.output["deleted"], 5);
  for (const json& bad : {json(0), json(10000001), json("10")}) {
    EXPECT_THROW(MakeTableDeleteStep(Spec("table_delete", {{"target", "env_b"}, {"table", "kb_doc"},
                                                           {"where", "1 = 1"}, {"max_rows", bad}})),
                 ConfigError)
        << bad.dump();
  }
}

// A column whose name holds a backtick is quoted with the backtick doubled in every
// statement: table_sync copies, compares, deletes (delete_missing) and compensates
// exactly; a table name with a backtick is refused at start.
TEST_F(TableStepsTest, BacktickInAColumnNameIsQuotedEverywhere) {
  CreateInBoth("CREATE TABLE bt (id INT PRIMARY KEY, `a``b` VARCHAR(20) NULL, `c``` INT NULL) DEFAULT CHARSET=utf8mb4");
  src_.Exec("INSERT INTO bt VALUES (1, 'one', 1), (2, 'two', 2), (3, NULL, 3)");
  tgt_.Exec("INSERT INTO bt VALUES (2, 'old two', 20), (9, 'only target', 9)");
  auto dump = [](TestSchema& db) {
    return db.pool().Run("dump bt", [](storage::Connection& c) {
      std::vector<std::string> rows;
      auto rs = c.Query("SELECT CONCAT(id, '|', QUOTE(`a``b`), '|', QUOTE(`c```)) FROM bt ORDER BY id");
      while (rs->next()) rows.push_back(std::string(rs->getString(1)));
      return rows;
    });
  };
  const auto before = dump(tgt_);
  auto step = Sync("1 = 1", {{"delete_missing", true}}, "bt");
  FakeContext ctx(ds_, json::object());
  StepResult r = step->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 3}, {"inserted", 2}, {"updated", 1}, {"unchanged", 0}, {"deleted", 1}}));
  EXPECT_EQ(dump(tgt_), dump(src_));
  // A second run compares by checksums and row hashes over the same columns.
  StepResult again = RunAsAnotherEvent(*step, json::object());
  EXPECT_EQ(again.output["unchanged"], 3);
  ctx.compensation = *r.compensation_data;
  StepResult c = step->Compensate(ctx);
  ASSERT_EQ(c.kind, StepResult::Kind::kOk) << c.error;
  // EV-2 wrote nothing, so compensating EV-1 restores the target as it was.
  EXPECT_EQ(dump(tgt_), before);
  EXPECT_THROW(Sync("1 = 1", json::object(), "b`t"), ConfigError);
}

// A table_repair event names a configured topic's table_sync step and keys; source,
// target, table, filter and delete_missing are the step's. A payload naming a
// datasource, table or filter (the old form, which let any producer write env_a from
// env_b) is refused and writes nothing; keys outside the step's filter are not synced.
TEST_F(TableStepsTest, RepairDoesOnlyWhatItsConfiguredStepWould) {
  CreateDocs();
  tgt_.Exec(kDocRows);
  tgt_.Exec("UPDATE kb_doc SET title = 'changed' WHERE id IN (1, 5)");
  tgt_.Exec("INSERT INTO kb_doc (id, space_id, kind) VALUES (9, 1, 'extra')");
  const auto source = Dump(src_, "kb_doc", "id");
  const auto target = Dump(tgt_, "kb_doc", "id");
  auto topics = std::make_shared<std::map<std::string, TopicSettings>>();
  (*topics)["SYNC"].steps.push_back(Spec(
      "table_sync", {{"source", "env_a"}, {"target", "env_b"}, {"table", "kb_doc"}, {"where", "space_id = :space_id"}}));
  (*topics)["PURGE"].steps.push_back(
      Spec("table_delete", {{"target", "env_a"}, {"table", "kb_doc"}, {"where", "1 = 1"}}, "docs"));
  auto repair = MakeTableRepairStep(testing::Step("repair", "table_repair"), topics);
  auto K = [](const char* text) { return json::parse(text); };
  int n = 0;
  auto run = [&](json payload) {
    FakeContext ctx(ds_, std::move(payload), "EV-R" + std::to_string(++n) + "#0");
    return repair->Execute(ctx);
  };
  const json hostile[] = {
      // The old payload, reversed: env_b's row 9 over env_a's.
      {{"source", "env_b"}, {"target", "env_a"}, {"table", "kb_doc"}, {"where", "1 = 1"}, {"params", json::object()},
       {"key_columns", K(R"(["id"])")}, {"keys", K("[[1], [9]]")}},
      {{"topic", "SYNC"}, {"step", "docs"}, {"payload", {{"space_id", 1}}}, {"keys", K("[[1]]")}, {"target", "env_a"}},
      {{"topic", "SYNC"}, {"step", "docs"}, {"payload", {{"space_id", 1}}}, {"keys", K("[[1]]")}, {"where", "1 = 1"}},
      {{"topic", "NOPE"}, {"step", "docs"}, {"keys", K("[[1]]")}},
      {{"topic", "SYNC"}, {"step", "other"}, {"keys", K("[[1]]")}},
      {{"topic", "PURGE"}, {"step", "docs"}, {"keys", K("[[1]]")}},  // not a table_sync step
      {{"topic", "SYNC"}, {"step", "docs"}, {"payload", {{"space_id", 1}}}, {"keys", json::array()}},
      {{"topic", "SYNC"}, {"step", "docs"}, {"payload", {{"space_id", 1}}}, {"keys", K("[[1, 2]]")}},
      {{"topic", "SYNC"}, {"step", "docs"}, {"payload", {{"space_id", 1}}}, {"keys", K(R"([[{"$gt": 0}]])")}},
  };
  for (const json& p : hostile) {
    StepResult r = run(p);
    EXPECT_EQ(r.kind, StepResult::Kind::kPermanent) << p.dump();
    EXPECT_EQ(r.error.find('\n'), std::string::npos) << r.error;
  }
  EXPECT_EQ(Dump(src_, "kb_doc", "id"), source);
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id"), target);

  // Key 5 is outside the step's filter for space 1: nothing is synced.
  StepResult outside = run({{"topic", "SYNC"}, {"step", "docs"}, {"payload", {{"space_id", 1}}}, {"keys", K("[[5]]")}});
  ASSERT_EQ(outside.kind, StepResult::Kind::kOk) << outside.error;
  EXPECT_EQ(outside.output["rows"], 0);
  EXPECT_EQ(Dump(tgt_, "kb_doc", "id"), target);

  // The configured direction, the listed keys: 1 is updated, 9 kept (no delete_missing).
  FakeContext ctx(ds_, {{"topic", "SYNC"}, {"step", "docs"}, {"payload", {{"space_id", 1}}}, {"keys", K("[[1], [9]]")}},
                  "EV-OK#0");
  StepResult r = repair->Execute(ctx);
  ASSERT_EQ(r.kind, StepResult::Kind::kOk) << r.error;
  EXPECT_EQ(Classic(r.output), (json{{"rows", 1}, {"inserted", 0}, {"updated", 1}, {"unchanged", 0}}));
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc WHERE id = 9"), 1);
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM kb_doc WHERE id = 1 AND title = 'changed'"), 0);
  EXPECT_EQ(Dump(src_, "kb_doc", "id"), source);
  ExpectCompensationRestores(*repair, ctx, r, "kb_doc", "id", target);

  // A node without topics refuses every repair.
  FakeContext none(ds_, ctx.payload(), "EV-NONE#0");
  EXPECT_EQ(MakeTableRepairStep(testing::Step("repair", "table_repair"))->Execute(none).kind,
            StepResult::Kind::kPermanent);
}

// table/ runs a sync without the saga engine: a table::RunContext of its own (as a relay
// of the sync would have), whose clock, not the process's, paces progress reports.
class SteppingClock final : public Clock {
 public:
  explicit SteppingClock(Millis step) : step_(step) {}
  TimePoint Now() override { return now_ += step_; }  // every read moves time on
  WallTime WallNow() override { return WallTime{} + (now_ - TimePoint{}); }
  bool SleepFor(Millis, std::stop_token stop) override { return !stop.stop_requested(); }
  bool WaitFor(std::condition_variable_any&, std::unique_lock<std::mutex>&, std::stop_token, Millis,
               const std::function<bool()>& done) override {
    return done();
  }

 private:
  const Millis step_;
  TimePoint now_{};
};

class TableRunContext final : public table::RunContext {
 public:
  TableRunContext(Datasources& ds, Clock& clock, json payload) : ds_(ds), clock_(clock), payload_(std::move(payload)) {}
  const std::string& event_code() const override { return event_; }
  const std::string& step_code() const override { return code_; }
  const json& payload() const override { return payload_; }
  int attempt() const override { return 1; }
  const json& compensation_data() const override { return compensation; }
  std::stop_token stop_token() const override { return {}; }
  bool StillOwner() override { return true; }
  void ReportProgress(const json& p) override { progress.push_back(p); }
  storage::ConnectionPool& Pool(const std::string& datasource) override { return ds_.Get(datasource); }
  Clock& clock() override { return clock_; }

  json compensation = nullptr;
  std::vector<json> progress;

 private:
  Datasources& ds_;
  Clock& clock_;
  json payload_;
  std::string event_ = "EV-T", code_ = "EV-T#0";
};

TEST_F(TableStepsTest, TheTableModuleSyncsWithoutTheEngineOnItsInjectedClock) {
  CreateInBoth(kNumberedTable);
  src_.Exec("INSERT INTO n SELECT seq, CONCAT('v', seq), 1 FROM seq_1_to_100");
  const table::Spec spec = table::ParseSpec(
      Spec("table_sync", {{"source", "env_a"}, {"target", "env_b"}, {"table", "n"}, {"where", "g = :g"},
                          {"chunk_size", 10}, {"lanes", 1}}),
      /*sync=*/true);
  table::ChunkTable chunks;

  // A clock that stands still: no second passes, so no progress is reported.
  FakeClock still;
  TableRunContext quiet(ds_, still, {{"g", 1}});
  table::SyncResult r = table::RunSync(quiet, spec, chunks);
  EXPECT_EQ(Classic(r.output), (json{{"rows", 100}, {"inserted", 100}, {"updated", 0}, {"unchanged", 0}}));
  EXPECT_EQ(Dump(tgt_, "n", "id"), Dump(src_, "n", "id"));
  EXPECT_TRUE(quiet.progress.empty()) << quiet.progress.size();
  EXPECT_EQ(r.compensation["step_code"], "EV-T#0");

  // Its compensation restores the empty target, through the same context.
  quiet.compensation = r.compensation;
  json c = table::CompensateSync(quiet, spec, chunks);
  EXPECT_EQ(c["removed"], 100) << c.dump();
  EXPECT_EQ(tgt_.QueryInt("SELECT COUNT(*) FROM n"), 0);

  // A clock on which every read is 2.5 s later: each chunk's end is past the 1 s
  // progress interval, so every chunk reports (on the process's clock this run takes
  // well under a second and would report none).
  SteppingClock fast(Millis(2500));
  TableRunContext ticking(ds_, fast, {{"g", 1}});
  r = table::RunSync(ticking, spec, chunks);
  EXPECT_EQ(Classic(r.output), (json{{"rows", 100}, {"inserted", 100}, {"updated", 0}, {"unchanged", 0}}));
  EXPECT_EQ(Dump(tgt_, "n", "id"), Dump(src_, "n", "id"));
  ASSERT_FALSE(ticking.progress.empty());
  EXPECT_EQ(static_cast<int64_t>(ticking.progress.size()), r.output["chunks"].get<int64_t>());
  EXPECT_EQ(ticking.progress.back()["running"], true);
}

}  // namespace
}  // namespace dsync::saga
