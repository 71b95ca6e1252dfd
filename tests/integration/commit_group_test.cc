// saga::CommitGroups (group commit of step successes) against a real MariaDB. Events
// are put RUNNING with one EXECUTING step row by SQL (as a claim would leave them);
// members write a demo_ledger row through conn() as a step handler would through
// StepContext::tx(). Every test checks the rows in the database, not only the
// return values.
//
// Putting several members in one group deterministically (CommitterHold): the
// committer finishes one group at a time, on its own thread. Another connection locks
// a spare event's row; a nullptr member of that event is committed, so the committer
// seals that group and blocks in its fence (the UPDATE of the spare's event row),
// which the test waits to see in information_schema. Until the lock is released no group can be
// sealed, so every member that joins meanwhile is in the same (next) group, and that
// group ends only after the release and after the last joiner gave its turn back
// (each member's Commit queues its success and gives the turn back in one step).
// The tests then assert on stats() that it was indeed one group.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <latch>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/clock.h"
#include "core/error.h"
#include "saga/commit_group.h"
#include "saga/step_handler.h"
#include "events/transitions.h"
#include "tests/support/db_test.h"
#include "tests/support/eventually.h"
#include "tests/support/saga_invariants.h"
#include "tests/support/test_db.h"

namespace dsync::saga {
namespace {

using namespace std::chrono_literals;
using testing::TestSchema;

constexpr const char* kNode = "10.0.0.5:7001";
constexpr int kVersion = 3;  // the owner's version of every event made here

enum class Result { kOk, kOwnershipLost, kRolledBack, kDbError, kOther, kNotRun };

const char* ResultName(Result r) {
  switch (r) {
    case Result::kOk: return "ok";
    case Result::kOwnershipLost: return "OwnershipLostError";
    case Result::kRolledBack: return "GroupRolledBack";
    case Result::kDbError: return "DbError";
    case Result::kOther: return "other exception";
    case Result::kNotRun: return "not run";
  }
  return "?";
}

template <class F>
Result Try(F&& f) {
  try {
    f();
    return Result::kOk;
  } catch (const OwnershipLostError&) {
    return Result::kOwnershipLost;
  } catch (const GroupRolledBack&) {
    return Result::kRolledBack;
  } catch (const DbError& e) {
    ADD_FAILURE() << "DbError: " << e.what();
    return Result::kDbError;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "exception: " << e.what();
    return Result::kOther;
  }
}

// Polls `pred` every 2 ms for up to 8 s.
bool WaitFor(const std::function<bool()>& pred) { return testing::Eventually(pred, 8000ms, 2ms); }

struct Event {
  int64_t id = 0;
  std::string code;
  int version = 0;
  std::string step_code() const { return code + "#1"; }
};

class CommitGroupTest : public testing::DbTest {
 protected:
  void TearDown() override { EXPECT_SAGA_ORDER(pool()); }

  storage::ConnectionPool& pool() { return db_.pool(); }
  SystemClock clock_;


  // An event RUNNING on kNode at `version` (attempt 1) with its one step EXECUTING.
  Event MakeEvent(const std::string& code, int version = kVersion) {
    Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, status, node_address, "
         "version, attempt, started_time) VALUES ('t1', ?, ?, 'DEMO', '{}', 'RUNNING', ?, ?, 1, NOW(3))",
         code, "d-" + code, kNode, version);
    Event e;
    e.id = Int("SELECT id FROM distribute_event WHERE code = ?", code);
    e.code = code;
    e.version = version;
    Exec("INSERT INTO distribute_event_step (tenant_id, code, job_code, sort, step_type, step_name, status, "
         "node_address, attempt, started_at) VALUES ('t1', ?, ?, 0, 'demo', 's1', 'EXECUTING', ?, 1, NOW(3))",
         e.step_code(), code, kNode);
    return e;
  }

  // The event's only step succeeded and it was the last: the event turns SUCCESS.
  static events::StepSuccess Success(const Event& e) {
    events::StepSuccess s;
    s.event_id = e.id;
    s.version = e.version;
    s.step_code = e.step_code();
    s.output = R"({"ok":true})";
    s.attempt = 1;
    s.finish = true;
    s.result_json = R"({"done":true})";
    return s;
  }

  // Commits `member` with `e`'s step success on a new thread of `threads` (joined
  // with them); `result` gets how that went.
  static void CommitOnThread(std::vector<std::jthread>& threads, CommitGroups& groups,
                             std::unique_ptr<CommitGroups::Member> member, const Event& e, Result& result) {
    threads.emplace_back([&groups, &e, &result, m = std::move(member)]() mutable {
      result = Try([&] { groups.Commit(std::move(m), Success(e)); });
    });
  }

  // The demo step's effect, as a handler writes it through tx().
  static void WriteLedger(storage::Connection& c, const Event& e) {
    c.Execute("INSERT INTO demo_ledger (idempotency_key, event_code, step_name) VALUES (?, ?, 's1') "
              "ON DUPLICATE KEY UPDATE applications = applications + 1",
              e.step_code(), e.code);
  }

  int64_t LedgerRows(const Event& e) { return Int("SELECT COUNT(*) FROM demo_ledger WHERE event_code = ?", e.code); }
  std::string Status(const Event& e) { return Str("SELECT status FROM distribute_event WHERE id = ?", e.id); }
  int64_t Version(const Event& e) { return Int("SELECT version FROM distribute_event WHERE id = ?", e.id); }
  std::string StepStatus(const Event& e) {
    return Str("SELECT status FROM distribute_event_step WHERE code = ?", e.step_code());
  }

  // The event is exactly as MakeEvent left it (apart from a version bumped by the
  // test): no status change, step still EXECUTING, no effect committed.
  void ExpectUntouched(const Event& e, int version) {
    SCOPED_TRACE(e.code);
    EXPECT_EQ(Status(e), "RUNNING");
    EXPECT_EQ(Version(e), version);
    EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event WHERE id = ? AND finished_time IS NULL AND result IS NULL",
                  e.id),
              1);
    EXPECT_EQ(StepStatus(e), "EXECUTING");
    EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE code = ? AND executed_at IS NULL", e.step_code()),
              1);
    EXPECT_EQ(LedgerRows(e), 0);
  }
  // The step's success was committed: event SUCCESS one version up, step SUCCESS,
  // exactly one application of the effect (none for a member that wrote nothing).
  void ExpectSucceeded(const Event& e, bool wrote = true) {
    SCOPED_TRACE(e.code);
    EXPECT_EQ(Status(e), "SUCCESS");
    EXPECT_EQ(Version(e), e.version + 1);
    EXPECT_EQ(StepStatus(e), "SUCCESS");
    EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE code = ? AND executed_at IS NOT NULL",
                  e.step_code()),
              1);
    EXPECT_EQ(LedgerRows(e), wrote ? 1 : 0);
    if (wrote) {
      EXPECT_EQ(Int("SELECT applications FROM demo_ledger WHERE idempotency_key = ?", e.step_code()), 1);
    }
  }

};

// Keeps the committer busy (see the top of the file) until Release() or destruction.
class CommitterHold {
 public:
  CommitterHold(storage::ConnectionPool& pool, CommitGroups& groups, Event spare,
                events::StepSuccess success)
      : spare_(std::move(spare)) {
    lock_.emplace(pool.Borrow());
    (*lock_)->Begin();
    auto rs = (*lock_)->Query("SELECT id FROM distribute_event WHERE id = ? FOR UPDATE", spare_.id);
    while (rs->next()) {
    }
    rs.reset();
    const uint64_t holder = (*lock_)->server_id();
    thread_ = std::thread([&groups, success, this] {
      result_ = Try([&] { groups.Commit(nullptr, success); });
    });
    // The committer's connection waits for the spare row's lock: it is in Finish, in
    // the fence, the first write of the spare's event row (the statement stays in the
    // process list while it waits).
    blocked_ = WaitFor([&] {
      return pool.Run("lock wait", [&](storage::Connection& c) {
               return c.QueryInt("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() "
                                 "AND ID <> ? AND INFO LIKE 'UPDATE distribute_event FORCE INDEX (PRIMARY) SET%'",
                                 holder).value_or(0);
             }) >= 1;
    });
  }
  ~CommitterHold() { Release(); }

  bool blocked() const { return blocked_; }

  // Lets the committer go on; returns the spare member's result.
  Result Release() {
    if (lock_) {
      (*lock_)->Rollback();
      lock_.reset();
    }
    if (thread_.joinable()) thread_.join();
    return result_;
  }

 private:
  Event spare_;
  std::optional<storage::ConnectionPool::Lease> lock_;
  std::thread thread_;
  Result result_ = Result::kNotRun;
  bool blocked_ = false;
};

// 1. Many threads at once: every member's writes and success commit, and members
// share commits.
TEST_F(CommitGroupTest, SixtyFourConcurrentMembersAllCommitInSharedGroups) {
  constexpr int kThreads = 64;
  std::vector<Event> events;
  for (int i = 0; i < kThreads; ++i) events.push_back(MakeEvent("B" + std::to_string(i)));

  CommitGroups groups(pool(), clock_, kNode);
  std::vector<Result> results(kThreads, Result::kNotRun);
  std::latch start(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        results[i] = Try([&] {
          auto m = groups.Join();
          WriteLedger(m->conn(), events[i]);
          groups.Commit(std::move(m), Success(events[i]));
        });
      });
    }
  }
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(results[i], Result::kOk) << events[i].code << ": " << ResultName(results[i]);

  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event WHERE status = 'SUCCESS' AND version = ? AND progress = 100 "
                "AND finished_time IS NOT NULL",
                kVersion + 1),
            kThreads);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE status = 'SUCCESS' AND executed_at IS NOT NULL"),
            kThreads);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM demo_ledger"), kThreads);
  EXPECT_EQ(Int("SELECT COUNT(DISTINCT event_code) FROM demo_ledger WHERE applications = 1"), kThreads);
  for (const Event& e : events) ExpectSucceeded(e);

  const uint64_t n_groups = groups.stats().groups.load();
  std::printf("%d members in %llu groups\n", kThreads, static_cast<unsigned long long>(n_groups));
  EXPECT_LT(n_groups, static_cast<uint64_t>(kThreads)) << "no COMMIT was shared";
  EXPECT_GE(n_groups, 1u);
  EXPECT_EQ(groups.stats().members.load(), static_cast<uint64_t>(kThreads));
  EXPECT_EQ(groups.stats().rolled_back.load(), 0u);
}

// 2. One member's event is taken away (its version bumped, as a sweeper reset does)
// after the members wrote and before the group's fence: that member gets
// OwnershipLostError, every other member of the group GroupRolledBack, and nothing of
// any of them is committed. Run again, the others succeed.
TEST_F(CommitGroupTest, FenceFailureOfOneMemberRollsBackTheWholeGroup) {
  constexpr int kMembers = 5;
  constexpr int kLost = 2;
  Event spare = MakeEvent("SPARE");
  std::vector<Event> events;
  for (int i = 0; i < kMembers; ++i) events.push_back(MakeEvent("F" + std::to_string(i)));

  CommitGroups groups(pool(), clock_, kNode);
  std::vector<Result> results(kMembers, Result::kNotRun);
  std::vector<uint64_t> conn_ids(kMembers, 0);
  std::atomic<int> written{0};
  {
    std::vector<std::jthread> threads;  // joined after the hold is released
    CommitterHold hold(pool(), groups, spare, Success(spare));
    ASSERT_TRUE(hold.blocked()) << "the committer never waited on the spare event's lock";
    for (int i = 0; i < kMembers; ++i) {
      threads.emplace_back([&, i] {
        results[i] = Try([&] {
          auto m = groups.Join();
          conn_ids[i] = m->conn().server_id();
          WriteLedger(m->conn(), events[i]);
          written++;
          groups.Commit(std::move(m), Success(events[i]));
        });
      });
    }
    // Every member has joined (and written); none can have been committed yet.
    ASSERT_TRUE(WaitFor([&] { return written.load() == kMembers; }));
    ASSERT_EQ(Exec("UPDATE distribute_event SET version = version + 1 WHERE id = ?", events[kLost].id), 1u);
    EXPECT_EQ(hold.Release(), Result::kOk);
  }
  for (int i = 0; i < kMembers; ++i) {
    EXPECT_EQ(results[i], i == kLost ? Result::kOwnershipLost : Result::kRolledBack)
        << events[i].code << ": " << ResultName(results[i]);
    EXPECT_EQ(conn_ids[i], conn_ids[0]) << "members not on one group's connection";
  }
  EXPECT_EQ(groups.stats().groups.load(), 2u);  // the spare's, then all members in one
  EXPECT_EQ(groups.stats().members.load(), static_cast<uint64_t>(kMembers + 1));
  EXPECT_EQ(groups.stats().rolled_back.load(), 1u);
  ExpectSucceeded(spare, /*wrote=*/false);
  for (int i = 0; i < kMembers; ++i) ExpectUntouched(events[i], i == kLost ? kVersion + 1 : kVersion);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM demo_ledger WHERE event_code LIKE 'F%'"), 0);

  // The others run their step again (as the engine does): now it commits.
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kMembers; ++i) {
      if (i == kLost) continue;
      threads.emplace_back([&, i] {
        results[i] = Try([&] {
          auto m = groups.Join();
          WriteLedger(m->conn(), events[i]);
          groups.Commit(std::move(m), Success(events[i]));
        });
      });
    }
  }
  for (int i = 0; i < kMembers; ++i) {
    if (i == kLost) {
      ExpectUntouched(events[i], kVersion + 1);
      continue;
    }
    EXPECT_EQ(results[i], Result::kOk) << events[i].code << ": " << ResultName(results[i]);
    ExpectSucceeded(events[i]);
  }
}

// 3. A member whose step failed after writing abandons the group: the group rolls
// back, its write with it, and the other member gets GroupRolledBack.
TEST_F(CommitGroupTest, AbandonRollsBackTheGroupWithTheAbandonedWrites) {
  Event spare = MakeEvent("SPARE");
  Event a = MakeEvent("A1");
  Event b = MakeEvent("B1");
  CommitGroups groups(pool(), clock_, kNode);
  Result b_result = Result::kNotRun;
  uint64_t a_conn = 0, b_conn = 0;
  {
    std::vector<std::jthread> threads;
    CommitterHold hold(pool(), groups, spare, Success(spare));
    ASSERT_TRUE(hold.blocked());
    auto ma = groups.Join();
    a_conn = ma->conn().server_id();
    WriteLedger(ma->conn(), a);
    // Uncommitted, but there on the group's connection.
    EXPECT_EQ(ma->conn().QueryInt("SELECT COUNT(*) FROM demo_ledger WHERE event_code = ?", a.code).value_or(-1), 1);
    groups.Abandon(std::move(ma));

    auto mb = groups.Join();  // the same group: the committer cannot seal it yet
    b_conn = mb->conn().server_id();
    WriteLedger(mb->conn(), b);
    CommitOnThread(threads, groups, std::move(mb), b, b_result);
    EXPECT_EQ(hold.Release(), Result::kOk);
  }
  EXPECT_EQ(b_result, Result::kRolledBack) << ResultName(b_result);
  EXPECT_EQ(a_conn, b_conn) << "A and B not in one group";
  EXPECT_EQ(groups.stats().groups.load(), 2u);
  EXPECT_EQ(groups.stats().rolled_back.load(), 1u);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM demo_ledger WHERE idempotency_key = ?", a.step_code()), 0);
  ExpectUntouched(a, kVersion);
  ExpectUntouched(b, kVersion);
  ExpectSucceeded(spare, /*wrote=*/false);
}

// 4. A step that wrote nothing commits its success with Commit(nullptr, ...), and is
// fenced like any other member: stale, it gets OwnershipLostError, writes nothing,
// and its group's other members are rolled back.
TEST_F(CommitGroupTest, CommitWithoutMemberCommitsAndIsFenced) {
  Event ok = MakeEvent("N1");
  Event stale = MakeEvent("N2");
  Event w = MakeEvent("W1");
  Event spare = MakeEvent("SPARE");
  CommitGroups groups(pool(), clock_, kNode);

  // Alone, at its version: the step success commits.
  ASSERT_EQ(Try([&] { groups.Commit(nullptr, Success(ok)); }), Result::kOk);
  EXPECT_EQ(Status(ok), "SUCCESS");
  EXPECT_EQ(Version(ok), kVersion + 1);
  EXPECT_EQ(StepStatus(ok), "SUCCESS");
  EXPECT_EQ(Str("SELECT output FROM distribute_event_step WHERE code = ?", ok.step_code()), R"({"ok":true})");
  EXPECT_EQ(Str("SELECT result FROM distribute_event WHERE id = ?", ok.id), R"({"done":true})");

  // Taken away (version bumped by another connection): fenced out, alone...
  ASSERT_EQ(Exec("UPDATE distribute_event SET version = version + 1 WHERE id = ?", stale.id), 1u);
  EXPECT_EQ(Try([&] { groups.Commit(nullptr, Success(stale)); }), Result::kOwnershipLost);
  ExpectUntouched(stale, kVersion + 1);

  // ...and together with a member that wrote: that one is rolled back.
  const uint64_t groups_before = groups.stats().groups.load();
  Result stale_result = Result::kNotRun, w_result = Result::kNotRun;
  {
    std::vector<std::jthread> threads;
    CommitterHold hold(pool(), groups, spare, Success(spare));
    ASSERT_TRUE(hold.blocked());
    std::atomic<bool> calling{false};
    threads.emplace_back([&] {
      calling = true;
      stale_result = Try([&] { groups.Commit(nullptr, Success(stale)); });
    });
    ASSERT_TRUE(WaitFor([&] { return calling.load(); }));
    // (The nullptr member queues at once under the groups' mutex; the group cannot
    // end before the hold's release below, several round trips later. stats() below
    // proves it was one group.)
    auto mw = groups.Join();
    WriteLedger(mw->conn(), w);
    CommitOnThread(threads, groups, std::move(mw), w, w_result);
    EXPECT_EQ(hold.Release(), Result::kOk);
  }
  EXPECT_EQ(stale_result, Result::kOwnershipLost) << ResultName(stale_result);
  EXPECT_EQ(w_result, Result::kRolledBack) << ResultName(w_result);
  EXPECT_EQ(groups.stats().groups.load() - groups_before, 2u) << "the stale member and W were not in one group";
  ExpectUntouched(stale, kVersion + 1);
  ExpectUntouched(w, kVersion);
  ExpectSucceeded(spare, /*wrote=*/false);
}

// 5. The group's transaction is READ COMMITTED: a row committed by another connection
// after the group began (and after a member's read) is visible to a later member.
TEST_F(CommitGroupTest, LaterMemberSeesRowsCommittedAfterTheGroupBegan) {
  Event spare = MakeEvent("SPARE");
  Event a = MakeEvent("R1");
  Event b = MakeEvent("R2");
  CommitGroups groups(pool(), clock_, kNode);
  Result a_result = Result::kNotRun, b_result = Result::kNotRun;
  uint64_t a_conn = 0, b_conn = 0;
  int64_t seen_by_a = -1, seen_by_b = -1;
  {
    std::vector<std::jthread> threads;
    CommitterHold hold(pool(), groups, spare, Success(spare));
    ASSERT_TRUE(hold.blocked());
    auto ma = groups.Join();  // BEGIN
    a_conn = ma->conn().server_id();
    // A consistent read: under REPEATABLE READ this would fix the snapshot.
    seen_by_a = ma->conn().QueryInt("SELECT COUNT(*) FROM demo_ledger WHERE event_code = 'OTHER'").value_or(-1);
    WriteLedger(ma->conn(), a);
    CommitOnThread(threads, groups, std::move(ma), a, a_result);

    // Another connection commits a row now.
    Exec("INSERT INTO demo_ledger (idempotency_key, event_code, step_name) VALUES ('OTHER#1', 'OTHER', 's1')");

    auto mb = groups.Join();  // the same group, the same transaction
    b_conn = mb->conn().server_id();
    seen_by_b = mb->conn().QueryInt("SELECT COUNT(*) FROM demo_ledger WHERE event_code = 'OTHER'").value_or(-1);
    WriteLedger(mb->conn(), b);
    CommitOnThread(threads, groups, std::move(mb), b, b_result);
    EXPECT_EQ(hold.Release(), Result::kOk);
  }
  EXPECT_EQ(seen_by_a, 0);
  EXPECT_EQ(seen_by_b, 1) << "a row committed after the group began is not visible in the group";
  EXPECT_EQ(a_conn, b_conn) << "A and B not in one group";
  EXPECT_EQ(groups.stats().groups.load(), 2u);
  EXPECT_EQ(a_result, Result::kOk) << ResultName(a_result);
  EXPECT_EQ(b_result, Result::kOk) << ResultName(b_result);
  ExpectSucceeded(a);
  ExpectSucceeded(b);
  ExpectSucceeded(spare, /*wrote=*/false);
}

// 6. A step that neither ends its event nor writes its progress (touch = false: a
// middle step within the touch interval) leaves the event row unwritten; the group
// fences it by locking the row at its version. Moved on meanwhile (a reset): the
// member loses the event and nothing of its step commits. At its version: the step
// commits and the event row is left as it was.
TEST_F(CommitGroupTest, AMemberWhoseEventRowIsNotWrittenIsFencedByItsVersionToo) {
  Event moved = MakeEvent("M");
  Event kept = MakeEvent("K");
  auto middle_step = [](const Event& e) {
    events::StepSuccess s = Success(e);
    s.finish = false;
    s.touch = false;
    s.result_json.clear();
    return s;
  };
  CommitGroups groups(pool(), clock_, kNode);
  Result moved_result = Try([&] {
    auto m = groups.Join();
    WriteLedger(m->conn(), moved);
    EXPECT_EQ(Exec("UPDATE distribute_event SET version = version + 1 WHERE id = ?", moved.id), 1u);
    groups.Commit(std::move(m), middle_step(moved));
  });
  EXPECT_EQ(moved_result, Result::kOwnershipLost) << ResultName(moved_result);
  ExpectUntouched(moved, kVersion + 1);

  Result kept_result = Try([&] {
    auto m = groups.Join();
    WriteLedger(m->conn(), kept);
    groups.Commit(std::move(m), middle_step(kept));
  });
  EXPECT_EQ(kept_result, Result::kOk) << ResultName(kept_result);
  EXPECT_EQ(Status(kept), "RUNNING");
  EXPECT_EQ(Version(kept), kVersion);
  EXPECT_EQ(StepStatus(kept), "SUCCESS");
  EXPECT_EQ(LedgerRows(kept), 1);
}

// 7. A group's connection runs with autocommit off and READ COMMITTED for the whole
// session; no other user of the pool ever gets such a session: the one kept between
// groups is never lent, and it is closed (not pooled) after a second unused.
TEST_F(CommitGroupTest, GroupSessionsNeverReachThePoolsOtherUsers) {
  std::set<uint64_t> group_sessions;
  // Whatever the pool lends now (its idle connections and two more) has the server's
  // defaults and is none of the groups' sessions.
  auto expect_plain_sessions = [&](const char* when) {
    SCOPED_TRACE(when);
    const storage::PoolStats st = pool().stats();
    std::vector<storage::ConnectionPool::Lease> leases;
    for (int i = 0; i < st.open - st.in_use + 2; ++i) leases.push_back(pool().Borrow());
    for (auto& l : leases) {
      EXPECT_FALSE(group_sessions.count(l->server_id())) << "a group's session was lent";
      EXPECT_EQ(l->QueryInt("SELECT @@autocommit"), 1);
      EXPECT_EQ(l->QueryInt("SELECT @@SESSION.tx_isolation = @@GLOBAL.tx_isolation"), 1);
    }
  };
  auto open_sessions = [&] {
    int64_t n = 0;
    for (uint64_t id : group_sessions) n += Int("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id);
    return n;
  };
  std::vector<Event> events;
  for (int i = 0; i < 8; ++i) events.push_back(MakeEvent("S" + std::to_string(i)));
  CommitGroups groups(pool(), clock_, kNode);
  for (const Event& e : events) {
    auto m = groups.Join();
    group_sessions.insert(m->conn().server_id());
    EXPECT_EQ(m->conn().QueryInt("SELECT @@autocommit"), 0);
    EXPECT_EQ(m->conn().QueryString("SELECT @@SESSION.tx_isolation"), "READ-COMMITTED");
    WriteLedger(m->conn(), e);
    groups.Commit(std::move(m), Success(e));
  }
  EXPECT_EQ(group_sessions.size(), 1u) << "the groups did not keep their connection";
  EXPECT_EQ(open_sessions(), 1) << "the kept connection is open between groups";
  expect_plain_sessions("while the groups keep a connection");
  // Over a second unused: the kept connection is closed.
  EXPECT_TRUE(WaitFor([&] { return open_sessions() == 0; })) << "the kept connection stayed open";
  expect_plain_sessions("after the groups went idle");
  for (const Event& e : events) ExpectSucceeded(e);
}

// 8. A Hold keeps the open group from being sealed while one thread submits several
// successes (SagaEngine::RunBatch), so they share one COMMIT; a group that fills up is
// sealed anyway, so a holder that submits more than a group takes never waits on
// itself.
TEST_F(CommitGroupTest, AHeldGroupTakesEverySubmissionUntilItIsFull) {
  constexpr int kMax = 4;
  std::vector<Event> events;
  for (int i = 0; i < 2 * kMax + 1; ++i) events.push_back(MakeEvent("H" + std::to_string(i)));
  CommitGroups groups(pool(), clock_, kNode, kMax);

  std::vector<CommitGroups::Ticket> tickets;
  {
    auto hold = groups.HoldOpen();
    for (int i = 0; i < kMax - 1; ++i) {
      tickets.push_back(groups.Submit(nullptr, Success(events[i])));
      std::this_thread::sleep_for(20ms);  // time enough for an unheld group to be sealed
    }
    EXPECT_EQ(groups.stats().groups.load(), 0u) << "sealed while held";
  }
  for (const auto& t : tickets) EXPECT_EQ(Try([&] { groups.Wait(t); }), Result::kOk);
  EXPECT_EQ(groups.stats().groups.load(), 1u) << "the held submissions were split";

  tickets.clear();
  {
    auto hold = groups.HoldOpen();
    for (int i = kMax - 1; i < static_cast<int>(events.size()); ++i) {
      tickets.push_back(groups.Submit(nullptr, Success(events[i])));  // a full group is sealed anyway
    }
  }
  for (const auto& t : tickets) EXPECT_EQ(Try([&] { groups.Wait(t); }), Result::kOk);
  EXPECT_GE(groups.stats().groups.load(), 3u);  // the first, a full one, and one or more for the rest
  EXPECT_EQ(groups.stats().members.load(), events.size());
  for (const Event& e : events) ExpectSucceeded(e, /*wrote=*/false);
}

// 9. A member that wrote nothing after all (a deferred claim that matched no row:
// EngineContext::JoinGroup) leaves the group. Its statement changed no row, so the
// transaction it leaves has nothing to undo: alone, its group ends empty and is not
// counted as rolled back (CommitGroupStats); beside a member that commits, that member
// commits. This is the group behind run_batch's "rolled_back 1" (issue 39 item 1):
// before RunBatch held its group open, X's lost claim could be the only member of a
// group, which then counted as a rollback though no one's work was in it.
TEST_F(CommitGroupTest, AMemberThatWroteNothingLeavesWithoutARollback) {
  Event lost = MakeEvent("L1");
  Event ok = MakeEvent("L2");
  Event spare = MakeEvent("SPARE");
  CommitGroups groups(pool(), clock_, kNode);
  // What a lost claim does in the group's transaction: an UPDATE at a version the event
  // is no longer at, and nothing else.
  auto claim_that_matches_nothing = [&](storage::Connection& c) {
    EXPECT_EQ(c.Execute("UPDATE distribute_event SET status = 'RUNNING', version = version + 1 "
                        "WHERE id = ? AND version = ?",
                        lost.id, kVersion - 1),
              0u);
    // The transaction the member leaves has changed no row: a rollback undoes nothing.
    EXPECT_EQ(c.QueryInt("SELECT COALESCE(SUM(trx_rows_modified), 0) FROM information_schema.INNODB_TRX "
                         "WHERE trx_mysql_thread_id = CONNECTION_ID()").value_or(-1),
              0);
  };

  // Alone: the group ends empty; not a rollback of anyone's work.
  auto m = groups.Join();
  claim_that_matches_nothing(m->conn());
  groups.Leave(std::move(m));
  ASSERT_TRUE(WaitFor([&] { return groups.stats().groups.load() == 1; })) << "the left group never ended";
  EXPECT_EQ(groups.stats().members.load(), 1u);
  EXPECT_EQ(groups.stats().rolled_back.load(), 0u);
  ExpectUntouched(lost, kVersion);

  // Beside a member that commits, in one group: that one commits, nothing rolls back.
  Result ok_result = Result::kNotRun;
  uint64_t lost_conn = 0, ok_conn = 0;
  {
    std::vector<std::jthread> threads;
    CommitterHold hold(pool(), groups, spare, Success(spare));
    ASSERT_TRUE(hold.blocked());
    auto ml = groups.Join();
    lost_conn = ml->conn().server_id();
    claim_that_matches_nothing(ml->conn());
    groups.Leave(std::move(ml));
    auto mo = groups.Join();  // the same group: the committer cannot seal it yet
    ok_conn = mo->conn().server_id();
    WriteLedger(mo->conn(), ok);
    CommitOnThread(threads, groups, std::move(mo), ok, ok_result);
    EXPECT_EQ(hold.Release(), Result::kOk);
  }
  EXPECT_EQ(ok_result, Result::kOk) << ResultName(ok_result);
  EXPECT_EQ(lost_conn, ok_conn) << "the leaver and OK were not in one group";
  EXPECT_EQ(groups.stats().rolled_back.load(), 0u);
  ExpectSucceeded(ok);
  ExpectUntouched(lost, kVersion);
  ExpectSucceeded(spare, /*wrote=*/false);
}

}  // namespace
}  // namespace dsync::saga
