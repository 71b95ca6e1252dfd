// Group commit of step successes: the fenced step transactions of many events share
// one database transaction and one COMMIT (one fsync), and the engine's own writes
// for all of them (steps SUCCESS, next steps EXECUTING, events touched or SUCCESS)
// go in at most four multi-row statements just before it.
//
//   saga::CommitGroups groups(pool, clock, "10.0.0.5:7001");
//   auto m = groups.Join();                  // the turn on the open group's connection
//   m->conn().Execute(...);                  // the handler's writes (StepContext::tx())
//   groups.Commit(std::move(m), success);    // waits for the group's COMMIT
//   groups.Commit(nullptr, success);         // a step that wrote nothing itself
//   // or groups.Abandon(std::move(m));      // the step failed: the group rolls back
//
// How it works. One group is open at a time, on one connection, in a READ COMMITTED
// transaction (a handler's reads see what is committed now, not a snapshot from
// before its event was claimed). A group's connection has its session set once to
// READ COMMITTED with autocommit off, so a group sends no SET TRANSACTION and no BEGIN.
// Between groups one such connection is kept for the next, while the pool has others
// to lend and the node is busy (ConnectionPool::MayKeep; gone after a second without
// a group, or after a failover); the rest are closed when they go back (retired),
// never lent to others. A member that writes takes the connection's turn
// (members take turns: a handler's statements after its first tx() run while it holds
// the turn, so keep them short, as StepContext says). The committer thread seals the
// open group as soon as no member holds the turn and no Hold keeps it open (new
// members start the next group, on another connection) and ends it with:
//   1. the engine's writes for all members (events::ApplyStepSuccesses): first every
//      member's event row, written at its owner's version or locked (`SELECT … FOR
//      UPDATE`), which is the fence: from there to COMMIT nobody can change those
//      events, so if each was still at its owner's version, every write of the group
//      is the owners'; then the step rows. A group of 1-step events is two multi-row
//      statements (three when handlers queued rows);
//   2. COMMIT.
// While one group waits for its fsync the next one fills, so under load one COMMIT
// carries many events, and at low load a member waits only for its own.
//
// Failure is all or nothing, and always safe to re-run:
//   - A member whose event is no longer at its version gets OwnershipLostError; the
//     group is rolled back (its writes may be among them), and the other members get
//     GroupRolledBack: nothing of their step was written, so they run it again (the
//     engine does; effects through tx() are exactly-once either way). Which members
//     lost their event is read after the rollback (versions only grow).
//   - A member whose step failed after taking a turn (its writes must not commit)
//     abandons the group: rolled back the same way.
//   - A statement error rolls the group back the same way (GroupRolledBack).
//   - The connection lost during COMMIT: DbError kCommitUnknown for every member
//     (the engine abandons those runs; the sweeper resets them by version).
//
// Thread safety: every member may be used from its own thread; a Member by one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "events/transitions.h"
#include "storage/connection_pool.h"

namespace dsync::saga {

// The group's transaction was rolled back; nothing of the member's step was written.
class GroupRolledBack : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CommitGroupStats {
  // rolled_back: groups whose members' work was discarded (fence lost, a member
  // abandoned, a statement failed); a group that every member left is not one.
  std::atomic<uint64_t> groups{0}, members{0}, rolled_back{0};
};

class CommitGroups {
 public:
  struct Group;

  class Member {
   public:
    // The group's connection, inside its transaction; valid until Commit/Abandon.
    storage::Connection& conn();

   private:
    friend class CommitGroups;
    explicit Member(std::shared_ptr<Group> g) : group_(std::move(g)) {}
    std::shared_ptr<Group> group_;
  };

  // `max_members`: a group is sealed at this size even if members keep arriving.
  // `pool` and `clock` (the owner's: how long a kept connection was idle) must
  // outlive the groups.
  CommitGroups(storage::ConnectionPool& pool, Clock& clock, std::string node, int max_members = 128);
  ~CommitGroups();
  CommitGroups(const CommitGroups&) = delete;
  CommitGroups& operator=(const CommitGroups&) = delete;

  // Takes the open group's turn (BEGIN if it is the first). Throws DbError when the
  // database fails (the group is then rolled back).
  std::unique_ptr<Member> Join();
  // A queued step success, to wait for.
  class Ticket {
   private:
    friend class CommitGroups;
    std::shared_ptr<Group> group_;
    int64_t event_id_ = 0;
  };

  // Queues the step success of the event `success.event_id` (at `success.version`),
  // gives the turn back (if `member`) and waits for the group's end. Throws
  // OwnershipLostError (the event was not at that version), GroupRolledBack, or
  // DbError kCommitUnknown.
  void Commit(std::unique_ptr<Member> member, events::StepSuccess success);
  // Commit in two halves, so that one thread can queue the successes of several
  // events (SagaEngine::RunBatch) and then wait for them: Submit queues and gives the
  // turn back without waiting (it may wait for room in a full group); Wait blocks until
  // that group ended and throws what Commit throws.
  Ticket Submit(std::unique_ptr<Member> member, events::StepSuccess success);
  void Wait(const Ticket& ticket);
  // The member's step failed: the group will roll back. Does not wait. The event's
  // row stays locked until then (the caller's next write to it waits briefly).
  void Abandon(std::unique_ptr<Member> member) noexcept;
  // The member wrote nothing after all (a claim that matched no row): gives the turn
  // back without rolling the group back. Does not wait.
  void Leave(std::unique_ptr<Member> member) noexcept;

  // Holds the open group open: the committer does not seal it (unless it is full)
  // while a Hold on it lives, so the successes one thread submits for several events
  // (SagaEngine::RunBatch) share one group and one COMMIT instead of being split by
  // the committer sealing after the first. Hold only while submitting, never while
  // waiting for a group.
  class Hold {
   public:
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    friend class CommitGroups;
    Hold(CommitGroups& groups, std::shared_ptr<Group> group) : groups_(groups), group_(std::move(group)) {}
    CommitGroups& groups_;
    std::shared_ptr<Group> group_;
  };
  std::unique_ptr<Hold> HoldOpen();

  CommitGroupStats& stats() { return stats_; }

 private:
  void CommitterLoop(std::stop_token stop);
  void Finish(Group& g);
  void GiveBackTurn(Group& g, bool poison);
  std::shared_ptr<Group> OpenGroup(std::unique_lock<std::mutex>& lock, bool take_turn);
  void BeginGroup(Group& g);
  // The group connections (see the file comment): a kept one, or one borrowed and set
  // up. Throws DbError.
  storage::ConnectionPool::Lease TakeConnection();
  void KeepConnection(storage::ConnectionPool::Lease lease);
  void DropIdleConnection();

  storage::ConnectionPool& pool_;
  Clock& clock_;
  const std::string node_;
  const int max_members_;
  CommitGroupStats stats_;

  std::mutex mu_;
  // Targeted wake-ups (a node may have hundreds of members waiting): joiners wait on
  // turn_cv_, the committer on committer_cv_, members for their group's end on the
  // group's own done_cv.
  std::condition_variable_any turn_cv_;
  std::condition_variable_any committer_cv_;
  std::shared_ptr<Group> open_;  // null: the next joiner starts one
  // The group connection kept between groups, and since when (spare_mu_).
  std::mutex spare_mu_;
  std::unique_ptr<storage::ConnectionPool::Lease> spare_;
  Clock::TimePoint spare_since_;
  std::jthread committer_;
};

}  // namespace dsync::saga
