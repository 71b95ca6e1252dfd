// AssignmentPlanner's fair dispatch and concurrency limits (issue 37,
// dispatcher/assignment_planner.h): pure logic against an in-memory stand-in for the
// two fair reads (the pairs with PENDING events, and per-pair windows), no database.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dispatcher/assignment_planner.h"

namespace dsync::dispatcher {
namespace {

NodeLoad FairNode(const std::string& address, int capacity, int in_flight = 0) {
  NodeLoad n;
  n.address = address;
  n.capacity = capacity;
  n.in_flight = in_flight;
  n.topics = {"*"};
  return n;
}

// PENDING events as the database would serve them to the fair reads.
class FakeDue {
 public:
  // `count` events of `tenant` at `priority`, each on its own entity unless `data_id`.
  void Add(const std::string& tenant, int count, int priority = 0, const std::string& topic = "T",
           const std::string& data_id = "") {
    for (int i = 0; i < count; ++i) {
      events::DueEvent e;
      e.id = ++last_id_;
      e.version = 1;
      e.topic = topic;
      e.tenant_id = tenant;
      e.priority = priority;
      e.data_id = data_id.empty() ? "d" + std::to_string(e.id) : data_id;
      events_.push_back(e);
    }
  }
  std::vector<TenantHead> Heads() const {
    std::vector<TenantHead> out;
    for (const auto& e : events_) out.push_back({e.priority, e.tenant_id});
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  // The ordering rule as the SQL applies it: no earlier non-terminal event of the entity.
  std::vector<events::DueEvent> Read(const std::vector<TenantWindow>& windows) const {
    std::vector<events::DueEvent> out;
    for (const auto& w : windows) {
      int n = 0;
      for (const auto& e : events_) {
        if (n >= w.limit) break;
        if (e.priority != w.priority || e.tenant_id != w.tenant_id || e.id <= w.after_id) continue;
        auto same_entity_before = [&](const events::DueEvent& p) {
          return p.id < e.id && p.tenant_id == e.tenant_id && p.data_id == e.data_id;
        };
        if (std::any_of(events_.begin(), events_.end(), same_entity_before) ||
            std::any_of(in_flight_.begin(), in_flight_.end(), same_entity_before)) {
          continue;
        }
        out.push_back(e);
        ++n;
      }
    }
    return out;
  }
  // Moves the assigned events out of PENDING; returns their tenants in order.
  std::vector<std::string> Take(const PlanResult& r) {
    std::vector<std::string> tenants;
    for (const auto& a : r.assignments) {
      auto it = std::find_if(events_.begin(), events_.end(), [&](const events::DueEvent& e) { return e.id == a.event_id; });
      EXPECT_NE(it, events_.end());
      if (it == events_.end()) continue;
      tenants.push_back(it->tenant_id);
      in_flight_.push_back(*it);
      events_.erase(it);
    }
    return tenants;
  }
  void FinishAll() { in_flight_.clear(); }

 private:
  int64_t last_id_ = 0;
  std::vector<events::DueEvent> events_;
  std::vector<events::DueEvent> in_flight_;
};

PlannerConfig FairConfig(int batch_size = 500) {
  PlannerConfig c;
  c.batch_size = batch_size;
  c.fair = true;
  return c;
}

// One dispatch cycle as DispatchCycle runs it in fair mode, with `free` slots on one
// node: the tenants it assigned, in order. Everything assigned finishes at its end.
std::vector<std::string> FairCycle(AssignmentPlanner& p, FakeDue& due, int free, int max_pages = 8) {
  p.BeginCycle({FairNode("a:1", free)});
  p.BeginFairCycle(due.Heads());
  std::vector<std::string> tenants;
  for (int page = 0; page < max_pages; ++page) {
    std::vector<TenantWindow> windows = p.NextWindows();
    if (windows.empty()) break;
    PlanResult r = p.PlanWindows(windows, due.Read(windows));
    for (auto& t : due.Take(r)) tenants.push_back(t);
  }
  due.FinishAll();
  return tenants;
}

TEST(PlannerFairTest, ALateTenantIsServedBesideABacklogNotAfterIt) {
  AssignmentPlanner p(FairConfig());
  FakeDue due;
  due.Add("A", 1000);
  due.Add("B", 10);
  std::map<std::string, int> got;
  for (int cycle = 0; cycle < 5; ++cycle) {
    for (const auto& t : FairCycle(p, due, 4)) ++got[t];
  }
  EXPECT_EQ(got["B"], 10);  // all of B's, while A still holds 990
  EXPECT_EQ(got["A"], 10);
}

TEST(PlannerFairTest, OneSlotPerCycleAlternatesTenants) {
  AssignmentPlanner p(FairConfig());
  FakeDue due;
  due.Add("A", 100);
  due.Add("B", 100);
  std::string order;
  for (int cycle = 0; cycle < 10; ++cycle) {
    auto t = FairCycle(p, due, 1);
    ASSERT_EQ(t.size(), 1u);
    order += t[0];
  }
  EXPECT_EQ(order, "ABABABABAB");
}

TEST(PlannerFairTest, UnfairPlanTakesTheBacklogFirst) {
  // Contrast: Plan() over a (priority, id) page gives every slot to the oldest events.
  PlannerConfig unfair;
  unfair.fair = false;
  AssignmentPlanner p(unfair);
  FakeDue due;
  due.Add("A", 50);
  due.Add("B", 10);
  p.BeginCycle({FairNode("a:1", 8)});
  std::vector<events::DueEvent> page = due.Read({{0, "A", 0, 8}, {0, "B", 0, 8}});
  std::sort(page.begin(), page.end(), [](const events::DueEvent& a, const events::DueEvent& b) { return a.id < b.id; });
  auto tenants = due.Take(p.Plan(page));
  EXPECT_EQ(std::count(tenants.begin(), tenants.end(), "A"), 8);
}

TEST(PlannerFairTest, DeficitBoundHoldsForAnyBudgets) {
  // Two and three backlogged tenants, budgets of 1..7 per cycle at random: at every
  // point each tenant's count is within 2 of the others' (one quantum each way).
  std::mt19937 rng(37);
  for (int tenants : {2, 3}) {
    AssignmentPlanner p(FairConfig());
    FakeDue due;
    const std::string names = "XYZ";
    for (int t = 0; t < tenants; ++t) due.Add(std::string(1, names[t]), 400);
    std::map<std::string, int> got;
    for (int cycle = 0; cycle < 120; ++cycle) {
      for (const auto& t : FairCycle(p, due, 1 + static_cast<int>(rng() % 7))) ++got[t];
      int lo = 1 << 30, hi = 0;
      for (int t = 0; t < tenants; ++t) {
        lo = std::min(lo, got[std::string(1, names[t])]);
        hi = std::max(hi, got[std::string(1, names[t])]);
      }
      ASSERT_LE(hi - lo, 2) << "tenants=" << tenants << " cycle " << cycle;
    }
  }
}

TEST(PlannerFairTest, WeightsShareByWeight) {
  PlannerConfig c = FairConfig();
  c.tenant_weights = {{"A", 3}};
  AssignmentPlanner p(c);
  FakeDue due;
  due.Add("A", 1000);
  due.Add("B", 1000);
  std::map<std::string, int> got;
  for (int cycle = 0; cycle < 40; ++cycle) {
    for (const auto& t : FairCycle(p, due, 2)) ++got[t];
  }
  EXPECT_EQ(got["A"] + got["B"], 80);
  EXPECT_NEAR(got["A"], 60, 3);
  EXPECT_NEAR(got["B"], 20, 3);
}

TEST(PlannerFairTest, AMoreUrgentPriorityGoesFirstWhateverTheTenants) {
  AssignmentPlanner p(FairConfig());
  FakeDue due;
  due.Add("A", 20, /*priority=*/5);
  due.Add("B", 20, 5);
  due.Add("C", 6, /*priority=*/-1);
  auto t = FairCycle(p, due, 10);
  ASSERT_EQ(t.size(), 10u);
  EXPECT_EQ(std::count(t.begin(), t.begin() + 6, "C"), 6);  // C's level drains first
  EXPECT_EQ(std::count(t.begin() + 6, t.end(), "A"), 2);    // then A and B share
  EXPECT_EQ(std::count(t.begin() + 6, t.end(), "B"), 2);
}

TEST(PlannerFairTest, OrderingPerEntityHoldsWithinEachTenant) {
  AssignmentPlanner p(FairConfig());
  FakeDue due;
  due.Add("A", 5, 0, "T", "same");  // one entity: one at a time
  due.Add("B", 5, 0, "T", "same");  // B's "same" is another entity (tenant, data_id)
  auto t = FairCycle(p, due, 10);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(std::count(t.begin(), t.end(), "A"), 1);
  EXPECT_EQ(std::count(t.begin(), t.end(), "B"), 1);
  // The planner's own rule too: two events of one entity in one window, one assigned.
  AssignmentPlanner q(FairConfig());
  q.BeginCycle({FairNode("a:1", 10)});
  q.BeginFairCycle({{0, "A"}});
  std::vector<TenantWindow> w = q.NextWindows();
  events::DueEvent e1;
  e1.id = 1;
  e1.version = 1;
  e1.topic = "T";
  e1.tenant_id = "A";
  e1.data_id = "x";
  events::DueEvent e2 = e1;
  e2.id = 2;
  PlanResult r = q.PlanWindows(w, {e2, e1});
  ASSERT_EQ(r.assignments.size(), 1u);
  EXPECT_EQ(r.assignments[0].event_id, 1);
  EXPECT_EQ(r.skipped_ordered, 1);
}

TEST(PlannerFairTest, ManyTenantsAreAllServedInRotation) {
  AssignmentPlanner p(FairConfig());
  FakeDue due;
  for (int t = 0; t < 100; ++t) due.Add("t" + std::to_string(100 + t), 3);
  std::map<std::string, int> got;
  for (int cycle = 0; cycle < 25; ++cycle) {  // 25 x 8 = 200 slots: 2 each
    for (const auto& t : FairCycle(p, due, 8, /*max_pages=*/1)) ++got[t];
  }
  ASSERT_EQ(got.size(), 100u);
  for (const auto& [tenant, n] : got) EXPECT_EQ(n, 2) << tenant;
}

TEST(PlannerFairTest, WindowsAreBoundedByTheBudget) {
  AssignmentPlanner p(FairConfig());
  FakeDue due;
  for (int t = 0; t < 50; ++t) due.Add("t" + std::to_string(100 + t), 100);
  p.BeginCycle({FairNode("a:1", 64)});
  p.BeginFairCycle(due.Heads());
  std::vector<TenantWindow> w = p.NextWindows();
  EXPECT_EQ(w.size(), AssignmentPlanner::kMaxWindows);
  int total = 0;
  for (const auto& x : w) total += x.limit;
  EXPECT_LE(total, 64 + 2 * static_cast<int>(w.size()));  // its share, rounded up, and one more each
}

// ---- concurrency limits ----

PlannerConfig LimitConfig() {
  PlannerConfig c;
  TopicPolicy sync;
  sync.datasources = {"env_a", "env_b"};
  c.topics["SYNC"] = sync;
  TopicPolicy keyed;
  keyed.concurrency_key = "payload.space_id";
  keyed.concurrency_limit = 2;
  c.topics["KEYED"] = keyed;
  c.datasource_limits = {{"env_b", 2}};
  return c;
}

std::vector<events::DueEvent> TopicEvents(const std::string& topic, int count, int64_t first_id = 1) {
  std::vector<events::DueEvent> out;
  for (int i = 0; i < count; ++i) {
    events::DueEvent e;
    e.id = first_id + i;
    e.version = 1;
    e.topic = topic;
    e.tenant_id = "t";
    e.data_id = "d" + std::to_string(e.id);
    out.push_back(e);
  }
  return out;
}

TEST(PlannerLimitTest, DatasourceLimitCountsWhatTheDatabaseHoldsAndThisCycle) {
  AssignmentPlanner p(LimitConfig());
  LimitUsage usage;
  usage.per_datasource["env_b"] = 1;  // one in flight already, on any node
  p.BeginCycle({FairNode("a:1", 16), FairNode("b:1", 16)}, usage);
  PlanResult r = p.Plan(TopicEvents("SYNC", 10));
  EXPECT_EQ(r.assignments.size(), 1u);
  EXPECT_EQ(r.skipped_limit, 9);
  // The full topic is kept out of the next page.
  PageFilter f = p.NextPageFilter();
  EXPECT_EQ(f.limited_topics, std::vector<std::string>{"SYNC"});
  // Other topics are not limited.
  EXPECT_EQ(p.Plan(TopicEvents("OTHER", 3, 100)).assignments.size(), 3u);
}

TEST(PlannerLimitTest, ASlotFreesOnlyWhenTheDatabaseSaysSo) {
  AssignmentPlanner p(LimitConfig());
  LimitUsage full;
  full.per_datasource["env_b"] = 2;
  p.BeginCycle({FairNode("a:1", 16)}, full);
  EXPECT_TRUE(p.Plan(TopicEvents("SYNC", 5)).assignments.empty());
  // More nodes do not raise it.
  p.BeginCycle({FairNode("a:1", 16), FairNode("b:1", 16), FairNode("c:1", 16)}, full);
  EXPECT_TRUE(p.Plan(TopicEvents("SYNC", 5)).assignments.empty());
  LimitUsage one;
  one.per_datasource["env_b"] = 1;
  p.BeginCycle({FairNode("a:1", 16)}, one);
  EXPECT_EQ(p.Plan(TopicEvents("SYNC", 5)).assignments.size(), 1u);
}

TEST(PlannerLimitTest, KeyLimitPerValueAndMissingKeysUnlimited) {
  AssignmentPlanner p(LimitConfig());
  LimitUsage usage;
  usage.per_key["KEYED"]["s1"] = 1;
  p.BeginCycle({FairNode("a:1", 100)}, usage);
  std::vector<events::DueEvent> events = TopicEvents("KEYED", 9);
  for (int i = 0; i < 6; ++i) events[i].limit_key = i < 3 ? "s1" : "s2";  // the last three: no value
  PlanResult r = p.Plan(events);
  std::vector<int64_t> ids;
  for (const auto& a : r.assignments) ids.push_back(a.event_id);
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 4, 5, 7, 8, 9}));  // s1: 1 more; s2: 2; no value: all
  EXPECT_EQ(r.skipped_limit, 3);
}

TEST(PlannerLimitTest, LimitsApplyToFairWindowsToo) {
  PlannerConfig c = LimitConfig();
  c.fair = true;
  AssignmentPlanner p(c);
  FakeDue due;
  due.Add("A", 10, 0, "SYNC");
  due.Add("B", 10, 0, "SYNC");
  auto t = FairCycle(p, due, 16);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_NE(t[0], t[1]);  // one each
}

}  // namespace
}  // namespace dsync::dispatcher
