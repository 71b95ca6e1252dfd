#include "saga/commit_group.h"

#include <set>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "saga/step_handler.h"
#include "storage/transaction.h"

namespace dsync::saga {

struct CommitGroups::Group {
  std::optional<storage::ConnectionPool::Lease> lease;  // borrowed by the first that needs it
  std::optional<storage::Transaction> tx;               // on `lease`, once begun
  bool begun = false;
  bool turn_taken = false;
  bool poisoned = false;  // a member failed after writing, or a statement failed
  int members = 0;        // joined (with or without a turn)
  int holds = 0;          // live Holds: not sealed before they end (unless full)
  std::vector<events::StepSuccess> successes;
  // The outcome, once done.
  bool done = false;
  bool rolled_back = false;
  bool emptied = false;  // every member left without a success: nothing to commit or lose
  std::set<int64_t> lost;        // events whose fence failed
  std::optional<DbError> error;  // kCommitUnknown
  std::condition_variable done_cv;
};

storage::Connection& CommitGroups::Member::conn() { return **group_->lease; }

CommitGroups::CommitGroups(storage::ConnectionPool& pool, Clock& clock, std::string node, int max_members)
    : pool_(pool), clock_(clock), node_(std::move(node)), max_members_(std::max(1, max_members)) {
  committer_ = std::jthread([this](std::stop_token stop) { CommitterLoop(stop); });
}

namespace {
// A group connection kept between groups goes (closed) after this long unused, so an
// idle node holds none.
constexpr std::chrono::seconds kKeepIdle{1};
// A kept connection unused this long is pinged before its next group.
constexpr std::chrono::milliseconds kValidateAfter{250};
}  // namespace

CommitGroups::~CommitGroups() {
  committer_.request_stop();
  committer_cv_.notify_all();
  committer_ = {};
  std::lock_guard lock(spare_mu_);
  spare_.reset();  // retired: closed by the pool
}

storage::ConnectionPool::Lease CommitGroups::TakeConnection() {
  std::unique_ptr<storage::ConnectionPool::Lease> kept;
  Clock::TimePoint since;
  {
    std::lock_guard lock(spare_mu_);
    kept = std::move(spare_);
    since = spare_since_;
  }
  if (kept) {
    // Checked as the pool checks its idle ones: the server may have closed it.
    if (clock_.Now() - since < kValidateAfter || (*kept)->Ping()) return std::move(*kept);
    (*kept)->mark_broken();
    kept.reset();
  }
  storage::ConnectionPool::Lease lease = pool_.Borrow();
  lease->retire();  // its session becomes the groups': never lent to others again
  try {
    lease->ExecuteDdl("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    lease->ExecuteDdl("SET SESSION autocommit = 0");
  } catch (const storage::StatementError& e) {
    if (e.kind() == DbError::Kind::kConnectionLost) lease->mark_broken();
    throw e.WithContext("set up a group connection");
  }
  return lease;
}

void CommitGroups::KeepConnection(storage::ConnectionPool::Lease lease) {
  // Kept only while the pool has others to lend (nothing else waits for this one) and
  // only one: while one group commits the next fills on its own connection.
  if (lease->broken() || !pool_.MayKeep(*lease)) return;  // closed by the pool
  std::lock_guard lock(spare_mu_);
  if (spare_) return;
  spare_ = std::make_unique<storage::ConnectionPool::Lease>(std::move(lease));
  spare_since_ = clock_.Now();
}

void CommitGroups::DropIdleConnection() {
  std::lock_guard lock(spare_mu_);
  if (spare_ && clock_.Now() - spare_since_ >= kKeepIdle) spare_.reset();
}

std::shared_ptr<CommitGroups::Group> CommitGroups::OpenGroup(std::unique_lock<std::mutex>& lock,
                                                             bool take_turn) {
  while (true) {
    if (!open_) open_ = std::make_shared<Group>();
    if (open_->members < max_members_ && !(take_turn && open_->turn_taken)) break;
    turn_cv_.wait(lock);
  }
  std::shared_ptr<Group> g = open_;
  if (take_turn) g->turn_taken = true;
  g->members++;
  return g;
}

// By the holder of the turn, or by the committer once the group is sealed: either
// way the only user of the group's connection. Sends nothing on a kept connection:
// its session is READ COMMITTED with autocommit off (TakeConnection).
void CommitGroups::BeginGroup(Group& g) {
  if (!g.lease) g.lease.emplace(TakeConnection());
  if (!g.begun) {
    if (!g.tx) g.tx.emplace(**g.lease, "group transaction");
    g.tx->BeginImplicitly();
    g.begun = true;
  }
}

std::unique_ptr<CommitGroups::Member> CommitGroups::Join() {
  std::shared_ptr<Group> g;
  {
    std::unique_lock lock(mu_);
    g = OpenGroup(lock, /*take_turn=*/true);
  }
  try {
    BeginGroup(*g);
  } catch (const storage::StatementError& e) {
    if (e.kind() == DbError::Kind::kConnectionLost && g->lease) (*g->lease)->mark_broken();
    GiveBackTurn(*g, /*poison=*/true);
    throw e.WithContext("begin group transaction");
  } catch (...) {
    GiveBackTurn(*g, /*poison=*/true);
    throw;
  }
  return std::unique_ptr<Member>(new Member(std::move(g)));
}

void CommitGroups::GiveBackTurn(Group& g, bool poison) {
  {
    std::lock_guard lock(mu_);
    g.turn_taken = false;
    if (poison) g.poisoned = true;
  }
  turn_cv_.notify_one();
  committer_cv_.notify_one();
}

void CommitGroups::Commit(std::unique_ptr<Member> member, events::StepSuccess success) {
  Wait(Submit(std::move(member), std::move(success)));
}

CommitGroups::Ticket CommitGroups::Submit(std::unique_ptr<Member> member, events::StepSuccess success) {
  Ticket ticket;
  ticket.event_id_ = success.event_id;
  {
    std::unique_lock lock(mu_);
    if (member) {
      ticket.group_ = std::move(member->group_);
      ticket.group_->turn_taken = false;
    } else {
      ticket.group_ = OpenGroup(lock, /*take_turn=*/false);
    }
    ticket.group_->successes.push_back(std::move(success));
  }
  if (member) turn_cv_.notify_one();
  committer_cv_.notify_one();
  return ticket;
}

void CommitGroups::Wait(const Ticket& ticket) {
  Group& g = *ticket.group_;
  std::unique_lock lock(mu_);
  g.done_cv.wait(lock, [&] { return g.done; });
  if (g.lost.count(ticket.event_id_)) throw OwnershipLostError("event was taken away from this node (group fence)");
  if (g.error) throw *g.error;
  if (g.rolled_back) throw GroupRolledBack("the step's group transaction was rolled back");
}

void CommitGroups::Abandon(std::unique_ptr<Member> member) noexcept {
  if (!member || !member->group_) return;
  GiveBackTurn(*member->group_, /*poison=*/true);
}

void CommitGroups::Leave(std::unique_ptr<Member> member) noexcept {
  if (!member || !member->group_) return;
  GiveBackTurn(*member->group_, /*poison=*/false);
}

std::unique_ptr<CommitGroups::Hold> CommitGroups::HoldOpen() {
  std::lock_guard lock(mu_);
  if (!open_) open_ = std::make_shared<Group>();
  open_->holds++;
  return std::unique_ptr<Hold>(new Hold(*this, open_));
}

CommitGroups::Hold::~Hold() {
  {
    std::lock_guard lock(groups_.mu_);
    group_->holds--;
  }
  groups_.committer_cv_.notify_one();
}

void CommitGroups::CommitterLoop(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (true) {
    // Seal the open group once someone joined and no one holds the turn.
    const bool ready = committer_cv_.wait_for(lock, stop, kKeepIdle, [&] {
      return open_ && open_->members > 0 && !open_->turn_taken &&
             (open_->holds == 0 || open_->members >= max_members_);
    });
    if (!ready) {
      if (stop.stop_requested()) return;
      DropIdleConnection();  // a second without a group to seal
      continue;
    }
    std::shared_ptr<Group> g = std::move(open_);
    lock.unlock();
    turn_cv_.notify_all();  // joiners waiting (a full group) start the next one
    Finish(*g);
    lock.lock();
    g->done = true;
    stats_.groups++;
    stats_.members += static_cast<uint64_t>(g->members);
    if (g->rolled_back && !g->emptied) stats_.rolled_back++;
    g->tx.reset();  // rolled back if still open
    if (g->lease) KeepConnection(std::move(*g->lease));  // or closed (retired, broken)
    g->lease.reset();
    g->done_cv.notify_all();
  }
}

void CommitGroups::Finish(Group& g) {
  auto roll_back = [&] {
    if (g.tx) g.tx->Rollback();
    g.rolled_back = true;
  };
  if (!g.poisoned && g.successes.empty()) {
    // Its members all left (claims that matched no row): an empty transaction ends,
    // no member's work is lost, so it does not count as a rolled-back group.
    g.emptied = true;
    return roll_back();
  }
  if (g.poisoned) return roll_back();
  try {
    BeginGroup(g);
    storage::Connection& c = **g.lease;
    // 1. The fence and the engine's writes (ApplyStepSuccesses writes or locks every
    // member's event row first, at its version).
    if (!events::ApplyStepSuccesses(c, g.successes, node_)) {
      roll_back();
      // Which members' events moved on: read after the rollback (versions only grow,
      // so one read at its version now was at it then too).
      std::vector<int64_t> ids;
      for (const auto& s : g.successes) ids.push_back(s.event_id);
      std::map<int64_t, int> versions = events::ReadVersions(c, ids);
      for (const auto& s : g.successes) {
        auto it = versions.find(s.event_id);
        if (it == versions.end() || it->second != s.version) g.lost.insert(s.event_id);
      }
      c.Rollback();  // autocommit off: the read began a transaction
      if (!g.lost.empty()) {
        spdlog::info("GROUP_FENCED_OUT node={} lost={} members={} (rolled back; the others run again)", node_,
                     g.lost.size(), g.members);
      } else {
        spdlog::error("GROUP_FENCE_MISMATCH node={} members={} (rolled back; they run again)", node_, g.members);
      }
      return;
    }
  } catch (const storage::StatementError& e) {
    DbError err = g.tx ? g.tx->Fail(e, "group commit") : e.WithContext("group commit");
    spdlog::warn("GROUP_ROLLED_BACK node={} members={} err={}", node_, g.members, err.what());
    if (err.kind() == DbError::Kind::kConnectionLost) {
      (*g.lease)->mark_broken();
      g.rolled_back = true;
      return;
    }
    return roll_back();
  } catch (const std::exception& e) {  // could not borrow a connection
    spdlog::warn("GROUP_ROLLED_BACK node={} members={} err={}", node_, g.members, e.what());
    return roll_back();
  }
  // 2. COMMIT.
  try {
    g.tx->Commit("commit step successes");
  } catch (const DbError& err) {
    if (err.kind() == DbError::Kind::kCommitUnknown) g.error = err;  // the connection is marked broken
    else roll_back();
  }
}

}  // namespace dsync::saga
