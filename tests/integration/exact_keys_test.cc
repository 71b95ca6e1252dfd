// Issue 34 item 1 (exact keys) and item 7 (code validation, one JSON depth limit),
// against a real MariaDB: codes compare byte for byte through the events layer, the
// API's store and the HTTP API; the batch path and the database agree; batches are
// scoped by service; a batch's completion cannot be taken by a producer; codes refuse
// hidden characters; JSON input nests at most kMaxInputJsonDepth levels; and V015
// refuses data whose keys the old collation joined but bytes do not.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/StreamCopier.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/options.h"
#include "api/event_store.h"
#include "api/http_server.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "dispatcher/batch_completer.h"
#include "events/batches.h"
#include "events/produce.h"
#include "storage/migrator.h"
#include "tests/support/saga_fixtures.h"
#include "tests/support/test_db.h"

namespace dsync {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::TestSchema;

Settings KeySettings(const std::string& service = "keys") {
  Settings s;
  s.service = service;
  s.api.max_body_bytes = 1 << 20;
  testing::AddDemoAndOtherTopics(s, /*max_retry=*/2, /*backoff_base=*/50ms, /*backoff_max=*/100ms);
  return s;
}

api::NewEvent Event(const std::string& code, const std::string& data_id = "d1") {
  api::NewEvent e;
  e.code = code;
  e.topic = "DEMO";
  e.tenant_id = "t1";
  e.data_id = data_id;
  return e;
}

int64_t CountWhere(TestSchema& db, const std::string& where) {
  return db.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE " + where);
}

// Rows whose code is exactly `code` (HEX: byte for byte whatever the collation).
int64_t Exactly(TestSchema& db, const std::string& code) {
  return db.pool().Run("count", [&](storage::Connection& c) {
    return c.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE HEX(code) = HEX(?)", code).value_or(-1);
  });
}

// ---- the events layer and the store -------------------------------------------

TEST(ExactKeys, CodesDifferingInCaseAccentsOrTrailingSpacesAreDifferentEvents) {
  TestSchema db;
  Settings settings = KeySettings();
  api::EventStore store(db.pool(), app::StoreOptionsFrom(settings));
  const std::vector<std::string> codes = {"CASE-abc", "case-ABC", "cafe", "caf\u00e9", "cafe ", "CAFE"};
  for (const auto& code : codes) {
    api::ProduceResult r = store.Produce(Event(code));
    EXPECT_TRUE(r.created) << "'" << code << "' answered as existing: " << r.event.code;
    EXPECT_EQ(r.event.code, code) << "the answer is another event";
  }
  EXPECT_EQ(CountWhere(db, "1=1"), static_cast<int64_t>(codes.size()));
  for (const auto& code : codes) {
    EXPECT_EQ(Exactly(db, code), 1) << code;
    EXPECT_EQ(store.GetEvent(code).code, code);
    // The same code again is the same event.
    api::ProduceResult again = store.Produce(Event(code));
    EXPECT_FALSE(again.created) << code;
    EXPECT_EQ(again.event.code, code);
  }
  // The events layer alone, as the completer and the plain INSERT use it.
  db.pool().Run("insert", [&](storage::Connection& c) {
    events::NewEventRow row;
    row.tenant_id = "t1";
    row.code = "Row-1";
    row.data_id = "d";
    row.topic = "DEMO";
    row.payload = "{}";
    row.service = "keys";
    EXPECT_TRUE(events::InsertEvent(c, row));
    row.code = "row-1";
    EXPECT_TRUE(events::InsertEvent(c, row));
    EXPECT_FALSE(events::InsertEvent(c, row));
  });
  EXPECT_EQ(CountWhere(db, "code IN ('Row-1', 'row-1')"), 2);
  EXPECT_EQ(CountWhere(db, "code LIKE 'row-%'"), 1);  // LIKE compares with the column's collation too
}

TEST(ExactKeys, TheOrderingKeyComparesExactly) {
  TestSchema db;
  // (tenant_id, data_id) orders events: 'Acme'/'X' and 'ACME'/'x' are different entities.
  db.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic) VALUES ('Acme', 'o1', 'X', 'DEMO'), "
          "('ACME', 'o2', 'x', 'DEMO'), ('Acme ', 'o3', 'X ', 'DEMO')");
  EXPECT_EQ(CountWhere(db, "tenant_id = 'Acme' AND data_id = 'X'"), 1);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(DISTINCT tenant_id, data_id) FROM distribute_event"), 3);
}

TEST(ExactKeys, ABatchAnswersWhatTheDatabaseStored) {
  TestSchema db;
  Settings settings = KeySettings();
  api::EventStore store(db.pool(), app::StoreOptionsFrom(settings));
  std::vector<api::NewEvent> events = {Event("Bat-1", "a"), Event("bat-1", "b"), Event("BAT-1 ", "c")};
  api::BatchResult r = store.ProduceBatch("B-case", events);
  EXPECT_EQ(r.created, 3);
  EXPECT_EQ(r.existing, 0);
  EXPECT_EQ(CountWhere(db, "batch_code = 'B-case'"), 3);
  // Again: all three exist, nothing more stored.
  r = store.ProduceBatch("B-case", events);
  EXPECT_EQ(r.created, 0);
  EXPECT_EQ(r.existing, 3);
  EXPECT_EQ(CountWhere(db, "1=1"), 3);
  // One new, one existing, in one call.
  r = store.ProduceBatch("B-case", {Event("bat-1"), Event("Bat-1\u00e9")});
  EXPECT_EQ(r.created, 1);
  EXPECT_EQ(r.existing, 1);
  EXPECT_EQ(CountWhere(db, "1=1"), 4);
  // Batch codes too: 'BX-1' and 'bx-1' are two batches.
  store.ProduceBatch("BX-1", {Event("x-upper")});
  store.ProduceBatch("bx-1", {Event("x-lower"), Event("x-lower-2")});
  EXPECT_EQ(store.GetBatch("BX-1").total, 1);
  EXPECT_EQ(store.GetBatch("bx-1").total, 2);
}

// The guard behind the answer: a database still comparing codes by the old collation
// (here: the column put back to it) merges codes dsync holds distinct; the batch is
// refused whole instead of answering created=3 with one row stored.
TEST(ExactKeys, ABatchOnADatabaseThatMergesCodesIsRefusedWhole) {
  TestSchema db;
  db.Exec("ALTER TABLE distribute_event MODIFY code VARCHAR(64) CHARACTER SET utf8mb4 "
          "COLLATE utf8mb4_general_ci NOT NULL");
  Settings settings = KeySettings();
  api::EventStore store(db.pool(), app::StoreOptionsFrom(settings));
  try {
    store.ProduceBatch("B-merge", {Event("Bat-1"), Event("bat-1"), Event("BAT-1 ")});
    FAIL() << "the batch was answered although the database stored fewer events";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("3 distinct codes are stored as 1 events"), std::string::npos) << e.what();
  }
  EXPECT_EQ(CountWhere(db, "1=1"), 0);  // rolled back: nothing written
}

TEST(ExactKeys, BatchesAreScopedByService) {
  TestSchema db;
  Settings s1 = KeySettings("svc-one"), s2 = KeySettings("svc-two");
  s1.topics["DONE"] = s1.topics["DEMO"];
  s2.topics["DONE"] = s2.topics["DEMO"];
  api::EventStore one(db.pool(), app::StoreOptionsFrom(s1)), two(db.pool(), app::StoreOptionsFrom(s2));
  api::OnComplete done{"DONE", {{"who", "one"}}, "0"};
  EXPECT_EQ(one.ProduceBatch("nightly", {Event("one-1"), Event("one-2")}, done).created, 2);
  done.payload = {{"who", "two"}};
  EXPECT_EQ(two.ProduceBatch("nightly", {Event("two-1")}, done).created, 1);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_batch WHERE batch_code = 'nightly'"), 2);
  EXPECT_EQ(one.GetBatch("nightly").total, 2);  // its own events only
  EXPECT_EQ(two.GetBatch("nightly").total, 1);

  db.Exec("UPDATE distribute_event SET status = 'SUCCESS' WHERE code IN ('one-1', 'one-2')");
  dispatcher::BatchCompleter completer_one(db.pool(), app::BatchCompleterOptionsFrom(s1)),
      completer_two(db.pool(), app::BatchCompleterOptionsFrom(s2));
  EXPECT_EQ(completer_two.CheckOnce([] { return true; }).completed, 0u);  // two-1 still PENDING
  EXPECT_EQ(completer_one.CheckOnce([] { return true; }).completed, 1u);
  db.Exec("UPDATE distribute_event SET status = 'SUCCESS' WHERE code = 'two-1'");
  EXPECT_EQ(completer_two.CheckOnce([] { return true; }).completed, 1u);
  EXPECT_EQ(CountWhere(db, "code = 'done:svc-one:nightly' AND service = 'svc-one' AND payload LIKE '%\"total\":2%'"), 1);
  EXPECT_EQ(CountWhere(db, "code = 'done:svc-two:nightly' AND service = 'svc-two' AND payload LIKE '%\"total\":1%'"), 1);
  EXPECT_EQ(one.GetBatch("nightly").completion->status, "COMPLETED");
  EXPECT_EQ(one.GetBatch("nightly").completion->completion_code, "done:svc-one:nightly");
}

TEST(ExactKeys, AProducerCannotTakeABatchsCompletion) {
  TestSchema db;
  Settings s = KeySettings("svc");
  s.topics["DONE"] = s.topics["DEMO"];
  api::EventStore store(db.pool(), app::StoreOptionsFrom(s));
  store.ProduceBatch("B1", {Event("b1-1")}, api::OnComplete{"DONE", json::object(), "0"});
  const std::string code = events::CompletionCode("svc", "B1");
  // Through the store (the API and the CLI): the prefix is refused.
  try {
    store.Produce(Event(code));
    FAIL() << "a completion code was produced by a producer";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("reserved for batch completion events"), std::string::npos) << e.what();
  }
  EXPECT_THROW(store.ProduceBatch("B2", {Event("done:anything")}), UsageError);
  // Through plain SQL it cannot be stopped: the completer finds it and reports it.
  db.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, service) VALUES ('t', '" + code +
          "', 'x', 'OTHER', 'svc')");
  db.Exec("UPDATE distribute_event SET status = 'SUCCESS' WHERE code = 'b1-1'");
  dispatcher::BatchCompleter completer(db.pool(), app::BatchCompleterOptionsFrom(s));
  auto report = completer.CheckOnce([] { return true; });
  EXPECT_EQ(report.completed, 0u);
  EXPECT_EQ(report.conflicts, 1u);
  api::BatchProgress p = store.GetBatch("B1");
  ASSERT_TRUE(p.completion.has_value());
  EXPECT_EQ(p.completion->status, "CONFLICT");
  EXPECT_NE(p.completion->conflict.find("was not produced by this batch's completer (topic OTHER"), std::string::npos)
      << p.completion->conflict;
  EXPECT_EQ(api::ToJson(p)["completion"]["status"], "CONFLICT");
  EXPECT_EQ(CountWhere(db, "code LIKE 'done:%'"), 1);  // the producer's, untouched
}

// ---- validation --------------------------------------------------------------

TEST(ExactKeys, CodesRefuseHiddenCharacters) {
  TestSchema db;
  Settings settings = KeySettings();
  api::EventStore store(db.pool(), app::StoreOptionsFrom(settings));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"rtl-\u202Efdp.exe", "U+202E"}, {"zw\u200Bsp", "U+200B"},  {"lrm\u200E", "U+200E"},
      {"iso\u2066x", "U+2066"},        {"wj\u2060", "U+2060"},     {"bom\uFEFF", "U+FEFF"},
      {"zwj\u200D", "U+200D"},         {"esc\x1b]0;pwn\x07", "U+001B"}, {"nel\u0085", "U+0085"},
      {"tab\tx", "U+0009"},            {"del\x7fx", "U+007F"}};
  for (const auto& [code, named] : bad) {
    try {
      store.Produce(Event(code));
      ADD_FAILURE() << "accepted a code with " << named;
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("code contains " + named, 0), 0u) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos);
    }
    // As a batch code, and inside a batch.
    EXPECT_THROW(store.ProduceBatch(code, {Event("fine")}), UsageError) << named;
    EXPECT_THROW(store.ProduceBatch("fine", {Event(code)}), UsageError) << named;
  }
  EXPECT_THROW(store.Produce(Event(std::string("bad\xff utf8"))), UsageError);
  EXPECT_EQ(CountWhere(db, "1=1"), 0);
  // What is allowed: any visible text, spaces included.
  EXPECT_TRUE(store.Produce(Event("\u65e5\u672c-caf\u00e9 ok")).created);
}

// ---- the HTTP API --------------------------------------------------------------

class ExactKeysHttp : public ::testing::Test {
 protected:
  ExactKeysHttp() : settings_(KeySettings("http-keys")), store_(db_.pool(), app::StoreOptionsFrom(settings_)) {
    api::HttpOptions o;
    o.listen = "127.0.0.1:0";
    o.connection.max_body_bytes = 1 << 20;
    o.connection.threads = 2;
    server_ = std::make_unique<api::HttpServer>(store_, o, clock_);
    server_->Start();
  }
  ~ExactKeysHttp() override { server_->Stop(); }

  std::pair<int, json> Post(const std::string& path, const std::string& body) {
    Poco::Net::HTTPClientSession session("127.0.0.1", server_->port());
    session.setTimeout(Poco::Timespan(10, 0));
    Poco::Net::HTTPRequest req("POST", path, Poco::Net::HTTPMessage::HTTP_1_1);
    req.setContentType("application/json");
    req.setContentLength64(static_cast<Poco::Int64>(body.size()));
    session.sendRequest(req) << body;
    Poco::Net::HTTPResponse resp;
    std::string text;
    Poco::StreamCopier::copyToString(session.receiveResponse(resp), text);
    return {resp.getStatus(), json::parse(text, nullptr, false)};
  }
  static json EventJson(const std::string& code) {
    return {{"code", code}, {"topic", "DEMO"}, {"tenant_id", "t1"}, {"data_id", "d"}};
  }

  TestSchema db_;
  Settings settings_;
  api::EventStore store_;
  SystemClock clock_;  // before server_: it outlives the server
  std::unique_ptr<api::HttpServer> server_;
};

TEST_F(ExactKeysHttp, ProduceComparesCodesExactly) {
  for (const std::string code : {"CASE-abc", "case-ABC", "cafe", "caf\u00e9", "cafe "}) {
    auto [status, body] = Post("/v1/events", EventJson(code).dump());
    EXPECT_EQ(status, 201) << code << ": created, not answered as existing: " << body.dump();
    EXPECT_EQ(body["code"], code) << "answered with another event";
  }
  auto [status, body] = Post("/v1/events", EventJson("case-ABC").dump());
  EXPECT_EQ(status, 200);  // the same code again: the same event
  EXPECT_EQ(body["code"], "case-ABC");
  EXPECT_EQ(CountWhere(db_, "1=1"), 5);

  auto batch = Post("/v1/batches", json{{"batch_code", "B-http"},
                                        {"events", json::array({EventJson("Bat-1"), EventJson("bat-1"),
                                                                EventJson("BAT-1 ")})}}
                                       .dump());
  EXPECT_EQ(batch.first, 201) << batch.second.dump();
  EXPECT_EQ(batch.second["created"], 3);
  EXPECT_EQ(CountWhere(db_, "batch_code = 'B-http'"), 3);
}

TEST_F(ExactKeysHttp, HiddenCharactersAndReservedCodesAreA400) {
  for (const std::string code : {"rtl-\u202Etxt", "zw\u200Bsp", "esc\x1b[2J", "done:http-keys:B1"}) {
    auto [status, body] = Post("/v1/events", EventJson(code).dump());
    EXPECT_EQ(status, 400) << body.dump();
    EXPECT_EQ(body["error"].get<std::string>().find('\n'), std::string::npos);
    auto batch = Post("/v1/batches", json{{"batch_code", "B"}, {"events", json::array({EventJson(code)})}}.dump());
    EXPECT_EQ(batch.first, 400) << batch.second.dump();
  }
  auto batch = Post("/v1/batches", json{{"batch_code", "B\u200B"}, {"events", json::array({EventJson("ok")})}}.dump());
  EXPECT_EQ(batch.first, 400);
  EXPECT_NE(batch.second["error"].get<std::string>().find("batch code contains U+200B"), std::string::npos)
      << batch.second.dump();
  EXPECT_EQ(CountWhere(db_, "1=1"), 0);
}

// One limit for the API and the CLI: a body nesting kMaxInputJsonDepth levels is read,
// one level more is refused before it is parsed, with the limit named.
TEST_F(ExactKeysHttp, OneJsonDepthLimit) {
  auto body_of_depth = [](int depth) {
    // {"code": ..., "payload": {"a": {"a": ... {}}}}: the body is one level, the payload the rest.
    std::string payload;
    for (int i = 1; i < depth - 1; ++i) payload += "{\"a\": ";
    payload += "{}";
    for (int i = 1; i < depth - 1; ++i) payload += "}";
    json e = EventJson("deep-" + std::to_string(depth));
    std::string text = e.dump();
    text.pop_back();
    return text + ", \"payload\": " + payload + "}";
  };
  ASSERT_EQ(JsonNestingDepth(body_of_depth(kMaxInputJsonDepth), 1000), kMaxInputJsonDepth);
  auto at = Post("/v1/events", body_of_depth(kMaxInputJsonDepth));
  EXPECT_EQ(at.first, 201) << at.second.dump();
  auto over = Post("/v1/events", body_of_depth(kMaxInputJsonDepth + 1));
  EXPECT_EQ(over.first, 400);
  EXPECT_EQ(over.second["error"], "the body nests deeper than 64 levels");
  EXPECT_EQ(kMaxInputJsonDepth, 64);
  EXPECT_THROW(ParseInputJson(std::string(65, '[') + std::string(65, ']'), "--payload"), UsageError);
  EXPECT_NO_THROW(ParseInputJson(std::string(64, '[') + std::string(64, ']'), "--payload"));
}

// ---- the migration -------------------------------------------------------------

std::vector<storage::Migration> Before(int version) {
  std::vector<storage::Migration> out;
  for (const auto& m : storage::EmbeddedMigrations()) {
    if (m.version < version) out.push_back(m);
  }
  return out;
}

TEST(ExactKeysMigration, UpgradesKeysToBinaryAndBatchesToTheirService) {
  TestSchema db(/*migrate=*/false);
  storage::Migrator(db.pool(), Before(15)).Migrate();
  db.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, batch_code) VALUES ('t', 'Old-1', 'd', "
          "'DEMO', 'BX')");
  db.Exec("INSERT INTO distribute_event_step (tenant_id, code, job_code, step_type, step_name) VALUES ('t', "
          "'Old-1#1', 'Old-1', 'demo', 's')");
  db.Exec("INSERT INTO distribute_batch (batch_code, on_complete_topic) VALUES ('BX', 'DONE')");
  storage::Migrator(db.pool()).Migrate();
  // Every key column compares bytes and does not pad.
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND "
                        "COLLATION_NAME IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin') AND CONCAT(TABLE_NAME, '.', "
                        "COLUMN_NAME) IN ('distribute_event.code', 'distribute_event.tenant_id', "
                        "'distribute_event.data_id', 'distribute_event.batch_code', 'distribute_event_archive.code', "
                        "'distribute_event_step.code', 'distribute_event_step.job_code', "
                        "'distribute_event_step_archive.job_code', 'distribute_batch.batch_code', "
                        "'demo_ledger.idempotency_key', 'demo_ledger.event_code', 'demo_ledger_audit.event_code')"),
            12);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE code = 'Old-1 '"), 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE code = 'old-1'"), 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE code = 'Old-1'"), 1);
  // The views that join keys across tables still work.
  EXPECT_EQ(db.QueryInt("SELECT steps_total FROM v_event_progress WHERE code = 'Old-1'"), 1);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM v_events_all WHERE code = 'Old-1'"), 1);
  // The batch row is now keyed by (service, batch_code).
  db.Exec("INSERT INTO distribute_batch (batch_code, on_complete_topic, service) VALUES ('BX', 'DONE', 'other')");
  db.Exec("INSERT INTO distribute_batch (batch_code, on_complete_topic) VALUES ('bx', 'DONE')");
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_batch"), 3);
  EXPECT_ANY_THROW(db.Exec("INSERT INTO distribute_batch (batch_code, on_complete_topic) VALUES ('BX', 'DONE')"));
}

TEST(ExactKeysMigration, RefusesRowsTheOldCollationJoinedNamingThem) {
  TestSchema db(/*migrate=*/false);
  storage::Migrator(db.pool(), Before(15)).Migrate();
  // Written by hand: a step whose job_code matches its event only ignoring case, and
  // an open batch whose event carries the batch code with a trailing space.
  db.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, batch_code) VALUES ('t', 'Ev-1', 'd', "
          "'DEMO', 'nightly ')");
  db.Exec("INSERT INTO distribute_event_step (tenant_id, code, job_code, step_type, step_name) VALUES ('t', "
          "'ev-1#1', 'EV-1', 'demo', 's')");
  db.Exec("INSERT INTO distribute_batch (batch_code, on_complete_topic) VALUES ('nightly', 'DONE')");
  try {
    storage::Migrator(db.pool()).Migrate();
    FAIL() << "migrated data whose keys would come apart";
  } catch (const SchemaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("migration 15 (exact_keys) cannot apply"), std::string::npos) << what;
    EXPECT_NE(what.find("'ev-1#1' / 'EV-1' / 'Ev-1'"), std::string::npos) << what;
  }
  EXPECT_EQ(storage::Migrator(db.pool()).CurrentVersion(), 14);
  db.Exec("UPDATE distribute_event_step SET job_code = 'Ev-1', code = 'Ev-1#1'");
  try {
    storage::Migrator(db.pool()).Migrate();
    FAIL() << "migrated an open batch whose events would leave it";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("'nightly' / 'Ev-1' / 'nightly '"), std::string::npos) << e.what();
  }
  db.Exec("UPDATE distribute_event SET batch_code = 'nightly'");
  storage::Migrator(db.pool()).Migrate();
  EXPECT_EQ(storage::Migrator(db.pool()).CurrentVersion(), storage::EmbeddedMigrations().back().version);
}

}  // namespace
}  // namespace dsync
