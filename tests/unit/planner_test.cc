// AssignmentPlanner (dispatcher/assignment_planner.h): pure logic with fake nodes and
// events, no database, no clock.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/options.h"
#include "config/settings.h"
#include "dispatcher/assignment_planner.h"
#include "dispatcher/dispatch_cycle.h"

namespace dsync::dispatcher {
namespace {

using namespace std::chrono_literals;

NodeLoad Node(const std::string& address, int capacity, int in_flight = 0,
              std::vector<std::string> topics = {"*"}) {
  NodeLoad n;
  n.address = address;
  n.capacity = capacity;
  n.in_flight = in_flight;
  n.topics = std::move(topics);
  return n;
}

// Events with ids from `first_id`, each on its own entity unless `data_id` is given.
std::vector<events::DueEvent> Events(int count, const std::string& topic = "T", int64_t first_id = 1,
                                 const std::string& data_id = "") {
  std::vector<events::DueEvent> out;
  for (int i = 0; i < count; ++i) {
    events::DueEvent e;
    e.id = first_id + i;
    e.version = 1;
    e.topic = topic;
    e.tenant_id = "t1";
    e.data_id = data_id.empty() ? "d" + std::to_string(e.id) : data_id;
    out.push_back(e);
  }
  return out;
}

PlannerConfig Config(Strategy strategy, int batch_size = 500, bool ordered = true, int batch_limit = 0) {
  PlannerConfig c;
  c.batch_size = batch_size;
  c.topics["T"] = TopicPolicy{strategy, ordered, batch_limit, {}, {}};
  return c;
}

std::map<std::string, int> PerNode(const PlanResult& r) {
  std::map<std::string, int> out;
  for (const auto& a : r.assignments) ++out[a.node_address];
  return out;
}

const Strategy kAllStrategies[] = {Strategy::kLeastLoad, Strategy::kWeighted,
                                   Strategy::kLeastConnections, Strategy::kRoundRobin,
                                   Strategy::kConsistentHash};

TEST(PlannerTest, StrategyNamesRoundTrip) {
  for (Strategy s : kAllStrategies) EXPECT_EQ(ParseStrategy(StrategyName(s)), s);
  EXPECT_EQ(ParseStrategy("fastest"), std::nullopt);
}

TEST(PlannerTest, NoStrategyExceedsFreeSlotsOrGivesDrainingNodesWork) {
  for (Strategy s : kAllStrategies) {
    AssignmentPlanner p(Config(s));
    NodeLoad draining = Node("d:1", 100);
    draining.draining = true;
    NodeLoad loaded = Node("c:1", 4, 1);
    loaded.load = 0.01;  // looks idle by its own report; the table says 1 in flight
    p.BeginCycle({Node("a:1", 2), Node("b:1", 3, 3), loaded, draining});
    EXPECT_EQ(p.remaining(), 2 + 0 + 3) << StrategyName(s);
    PlanResult r = p.Plan(Events(20));
    auto per = PerNode(r);
    EXPECT_EQ(per["a:1"], 2) << StrategyName(s);
    EXPECT_EQ(per.count("b:1"), 0u) << StrategyName(s);
    EXPECT_EQ(per["c:1"], 3) << StrategyName(s);
    EXPECT_EQ(per.count("d:1"), 0u) << StrategyName(s);
    EXPECT_EQ(r.assignments.size(), 5u);
    EXPECT_EQ(r.skipped_no_node, 15);
    EXPECT_EQ(p.remaining(), 0);
    EXPECT_EQ(p.NextPageFilter().limit, 0);
  }
}

TEST(PlannerTest, AssignmentsCarryTheVersionReadInInputOrder) {
  AssignmentPlanner p(Config(Strategy::kLeastLoad));
  p.BeginCycle({Node("a:1", 10)});
  auto events = Events(3, "T", 40);
  events[1].version = 7;
  PlanResult r = p.Plan(events);
  ASSERT_EQ(r.assignments.size(), 3u);
  EXPECT_EQ(r.assignments[0].event_id, 40);
  EXPECT_EQ(r.assignments[1].event_id, 41);
  EXPECT_EQ(r.assignments[1].version, 7);
  EXPECT_EQ(r.assignments[2].event_id, 42);
}

TEST(PlannerTest, LeastLoadFollowsProjectedLoadAndCapacity) {
  AssignmentPlanner p(Config(Strategy::kLeastLoad));
  // Capacities 1:2:4, idle: work in proportion to capacity.
  p.BeginCycle({Node("a:1", 10), Node("b:1", 20), Node("c:1", 40)});
  auto per = PerNode(p.Plan(Events(35)));
  EXPECT_EQ(per["a:1"], 5);
  EXPECT_EQ(per["b:1"], 10);
  EXPECT_EQ(per["c:1"], 20);

  // The least loaded by the table wins; ties go to the smaller address.
  p.BeginCycle({Node("c:1", 10, 5), Node("b:1", 10, 2), Node("a:1", 10, 2)});
  PlanResult r = p.Plan(Events(1));
  EXPECT_EQ(r.assignments[0].node_address, "a:1");
  r = p.Plan(Events(1, "T", 2));
  EXPECT_EQ(r.assignments[0].node_address, "b:1");
  // a:1 and b:1 now at 3/10, c:1 at 5/10: a:1 again.
  EXPECT_EQ(p.Plan(Events(1, "T", 3)).assignments[0].node_address, "a:1");
}

TEST(PlannerTest, WeightedFollowsTheSeedFormulaAndSpreadsTheBatch) {
  AssignmentPlanner p(Config(Strategy::kWeighted));
  // seed 004: capacity / (load + 0.001): the lower load wins at equal capacity, the
  // bigger capacity at equal load.
  NodeLoad a = Node("a:1", 100), b = Node("b:1", 100), c = Node("c:1", 200);
  a.load = 0.5;
  b.load = 0.3;
  c.load = 0.5;
  p.BeginCycle({a, b});
  EXPECT_EQ(p.Plan(Events(1)).assignments[0].node_address, "b:1");
  p.BeginCycle({a, c});
  EXPECT_EQ(p.Plan(Events(1)).assignments[0].node_address, "c:1");

  // Assignments of the cycle count as load: a batch is not dumped on one node.
  NodeLoad x = Node("x:1", 50), y = Node("y:1", 50), z = Node("z:1", 100);
  p.BeginCycle({x, y, z});
  auto per = PerNode(p.Plan(Events(60)));
  EXPECT_GT(per["x:1"], 5);
  EXPECT_GT(per["y:1"], 5);
  EXPECT_GT(per["z:1"], per["x:1"]);
  EXPECT_EQ(per["x:1"], per["y:1"]);
  EXPECT_EQ(per["x:1"] + per["y:1"] + per["z:1"], 60);

  // The node's weight multiplies its score.
  NodeLoad heavy = Node("h:1", 100), light = Node("l:1", 100);
  heavy.weight = 3;
  p.BeginCycle({light, heavy});
  per = PerNode(p.Plan(Events(40)));
  EXPECT_GT(per["h:1"], per["l:1"]);
}

TEST(PlannerTest, LeastConnectionsCountsReportedProcessingPlusThisCycle) {
  AssignmentPlanner p(Config(Strategy::kLeastConnections));
  NodeLoad a = Node("a:1", 100), b = Node("b:1", 100);
  a.processing_count = 5;
  b.processing_count = 1;
  p.BeginCycle({a, b});
  auto per = PerNode(p.Plan(Events(6)));
  // b takes 4 to reach 5, then they alternate from a (ties by address).
  EXPECT_EQ(per["b:1"], 5);
  EXPECT_EQ(per["a:1"], 1);
}

TEST(PlannerTest, RoundRobinRotatesAndKeepsItsCursorAcrossCycles) {
  AssignmentPlanner p(Config(Strategy::kRoundRobin));
  p.BeginCycle({Node("c:1", 10), Node("a:1", 10), Node("b:1", 10)});
  PlanResult r = p.Plan(Events(4));
  std::vector<std::string> got;
  for (const auto& a : r.assignments) got.push_back(a.node_address);
  EXPECT_EQ(got, (std::vector<std::string>{"a:1", "b:1", "c:1", "a:1"}));

  // Next cycle continues after a:1; a full node is skipped; a new node joins in order.
  p.BeginCycle({Node("a:1", 10), Node("b:1", 10, 10), Node("bb:1", 10), Node("c:1", 10)});
  r = p.Plan(Events(3, "T", 10));
  got.clear();
  for (const auto& a : r.assignments) got.push_back(a.node_address);
  EXPECT_EQ(got, (std::vector<std::string>{"bb:1", "c:1", "a:1"}));
}

TEST(PlannerTest, ConsistentHashKeepsEntitiesOnTheirNodeAndMostWhenANodeJoins) {
  std::vector<NodeLoad> four = {Node("10.0.0.1:7001", 100000), Node("10.0.0.2:7001", 100000),
                                Node("10.0.0.3:7001", 100000), Node("10.0.0.4:7001", 100000)};
  const int kKeys = 4000;
  // Unordered here so that one entity can appear twice in a batch.
  PlannerConfig unordered = Config(Strategy::kConsistentHash, 100000, /*ordered=*/false);
  AssignmentPlanner q(unordered);

  q.BeginCycle(four);
  std::map<std::string, std::string> before;
  for (const auto& a : q.Plan(Events(kKeys)).assignments) before[std::to_string(a.event_id)] = a.node_address;
  auto per = PerNode(PlanResult{});
  for (const auto& [_, node] : before) ++per[node];
  for (const auto& n : four) {
    EXPECT_GT(per[n.address], kKeys / 4 * 8 / 10) << n.address;  // roughly even
    EXPECT_LT(per[n.address], kKeys / 4 * 12 / 10) << n.address;
  }

  // Same entity, same node, on every cycle.
  q.BeginCycle(four);
  for (const auto& a : q.Plan(Events(kKeys)).assignments) EXPECT_EQ(before[std::to_string(a.event_id)], a.node_address);

  // A fifth node takes about a fifth of the keys; the rest stay where they were.
  auto five = four;
  five.push_back(Node("10.0.0.5:7001", 100000));
  q.BeginCycle(five);
  int moved = 0, moved_elsewhere = 0;
  for (const auto& a : q.Plan(Events(kKeys)).assignments) {
    if (before[std::to_string(a.event_id)] != a.node_address) {
      ++moved;
      if (a.node_address != "10.0.0.5:7001") ++moved_elsewhere;
    }
  }
  EXPECT_GT(moved, kKeys / 5 * 7 / 10);
  EXPECT_LT(moved, kKeys / 5 * 13 / 10);
  EXPECT_EQ(moved_elsewhere, 0);

  // When its node is full, an entity falls back to the next node by hash, and only then.
  auto one = Events(1);
  const std::string home = before["1"];
  std::vector<NodeLoad> home_full = four;
  for (auto& n : home_full) if (n.address == home) n.in_flight = n.capacity;
  q.BeginCycle(home_full);
  std::string fallback = q.Plan(one).assignments.at(0).node_address;
  EXPECT_NE(fallback, home);
  q.BeginCycle(home_full);
  EXPECT_EQ(q.Plan(one).assignments.at(0).node_address, fallback);
}

TEST(PlannerTest, NodesServeOnlyTheirTopics) {
  PlannerConfig c;
  c.topics["A"] = TopicPolicy{};
  c.topics["B"] = TopicPolicy{};
  AssignmentPlanner p(c);
  p.BeginCycle({Node("a-only:1", 10, 0, {"A"}), Node("b-only:1", 10, 0, {"B"}),
                Node("none:1", 10, 0, {"C"})});
  PlanResult r = p.Plan(Events(3, "A", 1));
  for (const auto& a : r.assignments) EXPECT_EQ(a.node_address, "a-only:1");
  r = p.Plan(Events(3, "B", 10));
  for (const auto& a : r.assignments) EXPECT_EQ(a.node_address, "b-only:1");
  r = p.Plan(Events(2, "Z", 20));  // nobody serves Z
  EXPECT_TRUE(r.assignments.empty());
  EXPECT_EQ(r.skipped_no_node, 2);

  // "*" and an empty list both mean every topic, including ones missing from the config.
  p.BeginCycle({Node("star:1", 10, 0, {"*"}), Node("empty:1", 10, 0, {})});
  r = p.Plan(Events(4, "UNCONFIGURED", 30));
  EXPECT_EQ(r.assignments.size(), 4u);
  EXPECT_EQ(PerNode(r)["empty:1"], 2);
  EXPECT_EQ(PerNode(r)["star:1"], 2);
}

TEST(PlannerTest, PageFilterNamesWhatTheNextPageCanUse) {
  PlannerConfig c = Config(Strategy::kLeastLoad, 100);
  c.topics["U"] = TopicPolicy{Strategy::kLeastLoad, /*ordered=*/false, 2, {}, {}};
  AssignmentPlanner p(c);
  NodeLoad drain = Node("d:1", 10, 0, {"*"});
  drain.draining = true;
  p.BeginCycle({Node("a:1", 1, 0, {"A", "B"}), Node("u:1", 10, 0, {"U"}), drain});
  PageFilter f = p.NextPageFilter();
  EXPECT_FALSE(f.any_topic);  // the "*" node is draining
  EXPECT_EQ(f.served_topics, (std::vector<std::string>{"A", "B", "U"}));
  EXPECT_TRUE(f.exhausted_topics.empty());
  EXPECT_EQ(f.unordered_topics, (std::vector<std::string>{"U"}));
  EXPECT_EQ(f.limit, 11);

  p.Plan(Events(1, "A", 1));     // a:1 is now full
  p.Plan(Events(3, "U", 10));    // U reaches its batch_limit of 2
  f = p.NextPageFilter();
  EXPECT_EQ(f.served_topics, (std::vector<std::string>{"U"}));
  EXPECT_EQ(f.exhausted_topics, (std::vector<std::string>{"U"}));
  EXPECT_EQ(f.limit, 8);
}

TEST(PlannerTest, BatchSizeAndTopicBatchLimitCapTheCycle) {
  PlannerConfig c = Config(Strategy::kLeastLoad, 10, true, 4);
  AssignmentPlanner p(c);
  p.BeginCycle({Node("a:1", 100)});
  PlanResult r = p.Plan(Events(6, "T", 1));
  EXPECT_EQ(r.assignments.size(), 4u);
  EXPECT_EQ(r.skipped_topic_limit, 2);
  r = p.Plan(Events(20, "OTHER", 100));
  EXPECT_EQ(r.assignments.size(), 6u);  // batch_size 10 in all
  EXPECT_EQ(r.skipped_budget, 14);
  EXPECT_EQ(p.remaining(), 0);

  // A new cycle starts from zero.
  p.BeginCycle({Node("a:1", 100)});
  EXPECT_EQ(p.Plan(Events(6, "T", 200)).assignments.size(), 4u);
}

TEST(PlannerTest, OrderedTopicsAssignOnlyTheFirstEventOfAnEntityPerCycle) {
  PlannerConfig c;
  c.topics["ORD"] = TopicPolicy{Strategy::kLeastLoad, true, 0, {}, {}};
  c.topics["FREE"] = TopicPolicy{Strategy::kLeastLoad, false, 0, {}, {}};
  AssignmentPlanner p(c);
  p.BeginCycle({Node("a:1", 100)});
  std::vector<events::DueEvent> batch;
  auto add = [&](int64_t id, const std::string& topic, const std::string& tenant, const std::string& data) {
    events::DueEvent e;
    e.id = id;
    e.version = 1;
    e.topic = topic;
    e.tenant_id = tenant;
    e.data_id = data;
    batch.push_back(e);
  };
  add(1, "ORD", "t1", "space-1");
  add(2, "ORD", "t1", "space-1");   // waits for 1
  add(3, "ORD", "t2", "space-1");   // another tenant: another entity
  add(4, "FREE", "t1", "space-2");
  add(5, "FREE", "t1", "space-2");  // unordered topic: runs beside 4
  add(6, "ORD", "t1", "space-2");   // ordered, behind 4 and 5 of another topic: waits
  add(7, "UNKNOWN", "t1", "space-3");
  add(8, "UNKNOWN", "t1", "space-3");  // topics missing from the config are ordered
  PlanResult r = p.Plan(batch);
  std::vector<int64_t> ids;
  for (const auto& a : r.assignments) ids.push_back(a.event_id);
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 3, 4, 5, 7}));
  EXPECT_EQ(r.skipped_ordered, 3);

  // Across pages of the same cycle too, even when the first was not assigned.
  p.BeginCycle({Node("a:1", 1)});
  EXPECT_EQ(p.Plan(Events(1, "ORD", 100, "k")).assignments.size(), 1u);
  p.BeginCycle({Node("small:1", 1, 0, {"OTHER"})});
  r = p.Plan(Events(1, "ORD", 100, "k"));
  EXPECT_EQ(r.skipped_no_node, 1);
  r = p.Plan(Events(1, "OTHER", 101, "k"));
  EXPECT_TRUE(r.assignments.empty());
  EXPECT_EQ(r.skipped_ordered, 1);
}

TEST(PlannerTest, ConfigFromSettings) {
  Settings s;
  s.dispatcher.batch_size = 77;
  TopicSettings t;
  t.strategy = "consistent_hash";
  t.ordered = false;
  t.batch_limit = 5;
  s.topics["SPACE_ADD"] = t;
  s.topics["PLAIN"] = TopicSettings{};
  PlannerConfig c = app::PlannerConfigFrom(s);
  EXPECT_EQ(c.batch_size, 77);
  EXPECT_EQ(c.topics["SPACE_ADD"].strategy, Strategy::kConsistentHash);
  EXPECT_FALSE(c.topics["SPACE_ADD"].ordered);
  EXPECT_EQ(c.topics["SPACE_ADD"].batch_limit, 5);
  EXPECT_EQ(c.topics["PLAIN"].strategy, Strategy::kLeastLoad);
  EXPECT_TRUE(c.topics["PLAIN"].ordered);
  AssignmentPlanner p(c);
  EXPECT_EQ(p.PolicyFor("NOT_THERE").strategy, Strategy::kLeastLoad);
  EXPECT_TRUE(p.PolicyFor("NOT_THERE").ordered);
}

TEST(PlannerTest, CadenceAfterACycle) {
  DispatcherSettings s;  // poll 200, idle 1000, busy 2
  // batch_size stopped it, nodes have room: at once
  CycleResult full{.free_slots = 10, .due_read = 10, .assigned = 10, .more_due = true, .room_left = true};
  EXPECT_EQ(NextDispatchDelay(full, 200ms, s), 0ms);
  CycleResult filled = full;  // the nodes' room stopped it: busy pacing
  filled.room_left = false;
  EXPECT_EQ(NextDispatchDelay(filled, 200ms, s), 2ms);

  CycleResult some = full;  // assigned, read all that was due: work exists
  some.more_due = false;
  EXPECT_EQ(NextDispatchDelay(some, 0ms, s), 2ms);

  CycleResult nothing_due{.free_slots = 10};
  Millis d = NextDispatchDelay(nothing_due, 0ms, s);
  EXPECT_EQ(d, 200ms);
  d = NextDispatchDelay(nothing_due, d, s);
  EXPECT_EQ(d, 400ms);
  d = NextDispatchDelay(nothing_due, d, s);
  EXPECT_EQ(d, 800ms);
  d = NextDispatchDelay(nothing_due, d, s);
  EXPECT_EQ(d, 1000ms);
  EXPECT_EQ(NextDispatchDelay(nothing_due, d, s), 1000ms);

  CycleResult nodes_full;  // no free slot, nothing known to wait: keep polling
  EXPECT_EQ(NextDispatchDelay(nodes_full, 1000ms, s), 200ms);
  CycleResult fenced = full;
  fenced.fenced_out = true;
  EXPECT_EQ(NextDispatchDelay(fenced, 0ms, s), 200ms);
}

TEST(PlannerTest, CadenceIsBusyIntervalWhileWorkExists) {
  DispatcherSettings s;  // poll 200, idle 1000, busy 2
  ASSERT_EQ(s.busy_interval, 2ms);

  // Assigned some, read everything due: nodes may free slots any moment.
  CycleResult some{.free_slots = 10, .due_read = 3, .assigned = 3};
  EXPECT_EQ(NextDispatchDelay(some, 0ms, s), 2ms);
  EXPECT_EQ(NextDispatchDelay(some, 1000ms, s), 2ms);

  // Every node full, events left waiting (nothing read, nothing assigned).
  CycleResult full_with_backlog{.backlog = true};
  EXPECT_EQ(NextDispatchDelay(full_with_backlog, 1000ms, s), 2ms);
  // Events read that no node had room for.
  CycleResult no_room{.free_slots = 2, .due_read = 5, .skipped = 5, .backlog = true};
  EXPECT_EQ(NextDispatchDelay(no_room, 200ms, s), 2ms);

  // Still at once after a full page with assignments while nodes have room.
  CycleResult page_full = some;
  page_full.more_due = true;
  page_full.backlog = true;
  page_full.room_left = true;
  EXPECT_EQ(NextDispatchDelay(page_full, 10ms, s), 0ms);

  // Events due but held back (ordering, batch limits), no backlog: poll_interval.
  CycleResult held{.free_slots = 10, .due_read = 4, .skipped = 4};
  EXPECT_EQ(NextDispatchDelay(held, 10ms, s), 200ms);

  // Nothing due right after cycles that assigned (busy: the first kBusyEmptyCycles):
  // still busy pacing, whatever the delay before.
  CycleResult nothing_due{.free_slots = 10};
  EXPECT_EQ(NextDispatchDelay(nothing_due, 2ms, s, /*busy=*/true), 2ms);
  EXPECT_EQ(NextDispatchDelay(nothing_due, 400ms, s, /*busy=*/true), 2ms);
  // After that: the idle backoff starts again at poll_interval.
  Millis d = NextDispatchDelay(nothing_due, 2ms, s);
  EXPECT_EQ(d, 200ms);
  EXPECT_EQ(NextDispatchDelay(nothing_due, d, s), 400ms);

  // A fenced-out cycle never runs busy, whatever it saw.
  CycleResult fenced = full_with_backlog;
  fenced.fenced_out = true;
  fenced.assigned = 0;
  EXPECT_EQ(NextDispatchDelay(fenced, 0ms, s), 200ms);

  // Configured values are used; busy never exceeds poll (settings built in code).
  s.busy_interval = 25ms;
  EXPECT_EQ(NextDispatchDelay(some, 0ms, s), 25ms);
  s.poll_interval = 20ms;
  EXPECT_EQ(NextDispatchDelay(some, 0ms, s), 20ms);
}

NodeLoad WithPrefetch(NodeLoad n, int prefetch) {
  n.prefetch = prefetch;
  return n;
}

TEST(PlannerTest, PrefetchLetsANodeHoldCapacityPlusPrefetch) {
  for (Strategy s : kAllStrategies) {
    AssignmentPlanner p(Config(s));
    // a: 4 + 4, 2 in flight -> 6 more; b: 2 + 0, full; c: 3 + 1, 4 in flight -> none.
    p.BeginCycle({WithPrefetch(Node("a:1", 4, 2), 4), Node("b:1", 2, 2),
                  WithPrefetch(Node("c:1", 3, 4), 1)});
    EXPECT_EQ(p.free_slots(), 6) << StrategyName(s);
    EXPECT_EQ(p.remaining(), 6) << StrategyName(s);
    PlanResult r = p.Plan(Events(10));
    auto per = PerNode(r);
    EXPECT_EQ(per["a:1"], 6) << StrategyName(s);
    EXPECT_EQ(per.count("b:1"), 0u) << StrategyName(s);
    EXPECT_EQ(per.count("c:1"), 0u) << StrategyName(s);
    EXPECT_EQ(r.skipped_no_node, 4) << StrategyName(s);
    EXPECT_EQ(p.remaining(), 0) << StrategyName(s);
  }
}

TEST(PlannerTest, PrefetchRoomOnlyWhenEveryEligibleNodeIsAtCapacity) {
  for (Strategy s : kAllStrategies) {
    AssignmentPlanner p(Config(s));
    // Both idle, capacity 4, prefetch 4: the first 8 fill capacities (4 each), only
    // then prefetch room is used, 4 more each.
    p.BeginCycle({WithPrefetch(Node("a:1", 4), 4), WithPrefetch(Node("b:1", 4), 4)});
    PlanResult first = p.Plan(Events(8));
    auto per = PerNode(first);
    EXPECT_EQ(per["a:1"], 4) << StrategyName(s);
    EXPECT_EQ(per["b:1"], 4) << StrategyName(s);
    PlanResult second = p.Plan(Events(20, "T", 100));
    per = PerNode(second);
    EXPECT_EQ(per["a:1"], 4) << StrategyName(s);
    EXPECT_EQ(per["b:1"], 4) << StrategyName(s);
    EXPECT_EQ(second.skipped_no_node, 12) << StrategyName(s);
  }
}

TEST(PlannerTest, PrefetchKeepsLeastLoadOrderByCapacity) {
  AssignmentPlanner p(Config(Strategy::kLeastLoad));
  // a: capacity 2 with a large prefetch, b: capacity 8 without. Below capacity the
  // order is by (in_flight + assigned) / capacity, so b takes its share first.
  p.BeginCycle({WithPrefetch(Node("a:1", 2), 100), Node("b:1", 8)});
  auto per = PerNode(p.Plan(Events(10)));
  EXPECT_EQ(per["a:1"], 2);
  EXPECT_EQ(per["b:1"], 8);
  // Both at capacity now: only a has room (prefetch), and it takes the rest.
  per = PerNode(p.Plan(Events(5, "T", 100)));
  EXPECT_EQ(per["a:1"], 5);
  EXPECT_EQ(per.count("b:1"), 0u);

  // Above capacity, least-load order still decides among nodes with prefetch room:
  // a at 3/2 = 12/8, b at 9/8, 10/8, 11/8 takes three; then b is out of room (8 + 4).
  p.BeginCycle({WithPrefetch(Node("a:1", 2, 3), 4), WithPrefetch(Node("b:1", 8, 9), 4)});
  PlanResult r = p.Plan(Events(5));
  ASSERT_EQ(r.assignments.size(), 5u);
  std::vector<std::string> order;
  for (const auto& a : r.assignments) order.push_back(a.node_address);
  EXPECT_EQ(order, (std::vector<std::string>{"b:1", "b:1", "b:1", "a:1", "a:1"}));
}

TEST(PlannerTest, PrefetchRoomCountsForPageFilters) {
  AssignmentPlanner p(Config(Strategy::kLeastLoad));
  // x serves X only and is at capacity, but has prefetch room: X is still served.
  p.BeginCycle({WithPrefetch(Node("x:1", 2, 2, {"X"}), 2), Node("y:1", 2, 2, {"Y"})});
  PageFilter f = p.NextPageFilter();
  EXPECT_EQ(f.limit, 2);
  EXPECT_FALSE(f.any_topic);
  EXPECT_EQ(f.served_topics, std::vector<std::string>{"X"});
}

// --- datasource-aware routing ------------------------------------------------

// Topic S syncs env_a -> env_b; topic D needs nothing the dispatcher knows of.
PlannerConfig RoutingConfig(Strategy strategy = Strategy::kLeastLoad) {
  PlannerConfig c;
  c.topics["S"] = TopicPolicy{strategy, true, 0, {"env_a", "env_b"}, {}};
  c.topics["D"] = TopicPolicy{strategy, true, 0, {}, {}};
  return c;
}

NodeLoad Reaching(const std::string& address, std::vector<std::string> datasources, int capacity = 10,
                  std::vector<std::string> topics = {"*"}) {
  NodeLoad n = Node(address, capacity, 0, std::move(topics));
  n.datasources = std::move(datasources);
  return n;
}

TEST(PlannerTest, TopicDatasourcesAreTheTableStepsSourcesAndTargets) {
  TopicSettings t;
  auto step = [](const std::string& type, nlohmann::json params) {
    StepSpec s;
    s.name = type;
    s.type = type;
    s.params = std::move(params);
    return s;
  };
  t.steps = {step("table_sync", {{"source", "env_a"}, {"target", "env_b"}, {"table", "x"}}),
             step("table_delete", {{"target", "env_c"}, {"table", "x"}}),
             step("table_sync", {{"source", "env_a"}, {"target", "env_b"}, {"table", "y"}}),
             step("demo", {{"source", "ignored"}}),
             step("my_custom_step", {{"target", "unknown_to_the_dispatcher"}})};
  EXPECT_EQ(TopicDatasources(t), (std::vector<std::string>{"env_a", "env_b", "env_c"}));

  Settings s;
  s.topics["T"] = t;
  EXPECT_EQ(app::PlannerConfigFrom(s).topics["T"].datasources,
            (std::vector<std::string>{"env_a", "env_b", "env_c"}));
}

TEST(PlannerTest, EventGoesOnlyToANodeReachingEveryDatasourceOfItsTopic) {
  for (Strategy strategy : kAllStrategies) {
    AssignmentPlanner p(RoutingConfig(strategy));
    // a:1 is the least loaded and first by address, but lacks env_b.
    p.BeginCycle({Reaching("a:1", {"env_a"}), Reaching("b:1", {"env_a", "env_b"}, 10)});
    PlanResult r = p.Plan(Events(6, "S"));
    EXPECT_EQ(PerNode(r), (std::map<std::string, int>{{"b:1", 6}})) << StrategyName(strategy);
    // A topic needing no datasource goes to either.
    r = p.Plan(Events(4, "D", 100));
    EXPECT_EQ(r.assignments.size(), 4u) << StrategyName(strategy);
    EXPECT_TRUE(p.Unroutable().empty()) << StrategyName(strategy);
  }
}

TEST(PlannerTest, NodeNotReportingDatasourcesReachesAllAsBeforeTheField) {
  AssignmentPlanner p(RoutingConfig());
  p.BeginCycle({Node("old:1", 4)});  // datasources nullopt: an older node
  PlanResult r = p.Plan(Events(3, "S"));
  EXPECT_EQ(r.assignments.size(), 3u);
  EXPECT_TRUE(p.Unroutable().empty());
}

TEST(PlannerTest, UnroutableTopicIsNamedWithTheReasonAndKeptOutOfThePage) {
  AssignmentPlanner p(RoutingConfig());
  p.BeginCycle({Reaching("a:1", {"env_a"}), Reaching("c:1", {})});
  ASSERT_EQ(p.Unroutable().size(), 1u);
  const std::string& why = p.Unroutable().at("S");
  EXPECT_NE(why.find("reaches every datasource it needs (env_a,env_b)"), std::string::npos) << why;
  EXPECT_NE(why.find("a:1 lacks env_b"), std::string::npos) << why;
  EXPECT_NE(why.find("c:1 lacks env_a,env_b"), std::string::npos) << why;

  // Both nodes serve "*": without the blocked list the page would read S's events.
  PageFilter f = p.NextPageFilter();
  EXPECT_TRUE(f.any_topic);
  EXPECT_EQ(f.blocked_topics, std::vector<std::string>{"S"});

  // Read anyway (a page read before the node list changed): not assigned.
  PlanResult r = p.Plan(Events(2, "S"));
  EXPECT_TRUE(r.assignments.empty());
  EXPECT_EQ(r.skipped_no_node, 2);

  // A node reaching both joins: routable again, nothing blocked.
  p.BeginCycle({Reaching("a:1", {"env_a"}), Reaching("b:1", {"env_b", "env_a"})});
  EXPECT_TRUE(p.Unroutable().empty());
  EXPECT_TRUE(p.NextPageFilter().blocked_topics.empty());
  EXPECT_EQ(PerNode(p.Plan(Events(2, "S"))), (std::map<std::string, int>{{"b:1", 2}}));
}

TEST(PlannerTest, TopicBlockedOnlyWhereNoFreeNodeCanRunIt) {
  AssignmentPlanner p(RoutingConfig());
  // b:1 can run S but is full: S is routable (it runs once b:1 frees a slot) but not
  // worth reading now.
  NodeLoad full = Reaching("b:1", {"env_a", "env_b"}, 2);
  full.in_flight = 2;
  p.BeginCycle({Reaching("a:1", {"env_a"}), full});
  EXPECT_TRUE(p.Unroutable().empty());
  EXPECT_EQ(p.NextPageFilter().blocked_topics, std::vector<std::string>{"S"});
  // Explicit topic lists: a node serving S it cannot run does not put S in served.
  p.BeginCycle({Reaching("a:1", {"env_a"}, 10, {"S", "D"})});
  PageFilter f = p.NextPageFilter();
  EXPECT_FALSE(f.any_topic);
  EXPECT_EQ(f.served_topics, std::vector<std::string>{"D"});
}

TEST(PlannerTest, BadTopicOfANodeIsNotSentThereAndNamedWhenNoOtherNodeRunsIt) {
  PlannerConfig c = RoutingConfig();
  c.topics["B"] = TopicPolicy{};
  AssignmentPlanner p(c);
  NodeLoad bad = Reaching("a:1", {"env_a", "env_b"});
  bad.bad_topics = {{"B", "config: topics.B.steps[0] (x): unknown step type 'nope'"}};
  NodeLoad good = Reaching("b:1", {"env_a", "env_b"});
  p.BeginCycle({bad, good});
  EXPECT_TRUE(p.Unroutable().empty());
  EXPECT_EQ(PerNode(p.Plan(Events(5, "B"))), (std::map<std::string, int>{{"b:1", 5}}));
  // a:1 still takes everything else.
  EXPECT_EQ(PerNode(p.Plan(Events(1, "S", 100))), (std::map<std::string, int>{{"a:1", 1}}));

  p.BeginCycle({bad});
  ASSERT_EQ(p.Unroutable().count("B"), 1u);
  const std::string& why = p.Unroutable().at("B");
  EXPECT_NE(why.find("plan failed to build on every live node serving it"), std::string::npos) << why;
  EXPECT_NE(why.find("unknown step type 'nope'"), std::string::npos) << why;
  EXPECT_TRUE(p.Plan(Events(2, "B", 200)).assignments.empty());
  // A bad topic missing from the dispatcher's config is judged too.
  bad.bad_topics["ONLY_ON_NODES"] = "config: topics.ONLY_ON_NODES.steps[0] (s): bad where";
  p.BeginCycle({bad});
  EXPECT_EQ(p.Unroutable().count("ONLY_ON_NODES"), 1u);
  // The node drops a bad topic from its explicit list (so that older dispatchers send
  // none either): the reason still names it and why.
  NodeLoad listed = Reaching("c:1", {"env_a", "env_b"}, 10, {"S", "D"});
  listed.bad_topics = {{"B", "config: topics.B.steps[0] (x): unknown step type 'nope'"}};
  p.BeginCycle({listed});
  EXPECT_NE(p.Unroutable().at("B").find("c:1 plan failed: config: topics.B.steps[0] (x)"), std::string::npos)
      << p.Unroutable().at("B");
}

TEST(PlannerTest, UnroutableWithoutServingOrLiveNodes) {
  AssignmentPlanner p(RoutingConfig());
  p.BeginCycle({Reaching("a:1", {"env_a", "env_b"}, 4, {"D"})});
  ASSERT_EQ(p.Unroutable().count("S"), 1u);
  EXPECT_EQ(p.Unroutable().at("S"), "no live node serves topic S");
  NodeLoad draining = Reaching("d:1", {"env_a", "env_b"});
  draining.draining = true;
  p.BeginCycle({draining});
  EXPECT_EQ(p.Unroutable().size(), 2u);
  EXPECT_EQ(p.Unroutable().at("D"), "no live node takes work");
}

// --- per-step routing ----------------------------------------------------------

// Topic G: [table_delete on env_a, table_delete on env_b, a demo step], built from the
// config as a dispatcher builds it; topic X: one table_sync env_a -> env_b.
PlannerConfig PerStepConfig(Strategy strategy = Strategy::kLeastLoad) {
  auto step = [](const std::string& name, const std::string& type, nlohmann::json params) {
    StepSpec s;
    s.name = name;
    s.type = type;
    s.params = std::move(params);
    return s;
  };
  Settings settings;
  TopicSettings g;
  g.strategy = StrategyName(strategy);
  g.steps = {step("del_a", "table_delete", {{"target", "env_a"}, {"table", "t"}, {"where", "id = :id"}}),
             step("del_b", "table_delete", {{"target", "env_b"}, {"table", "t"}, {"where", "id = :id"}}),
             step("note", "demo", nlohmann::json::object())};
  settings.topics["G"] = g;
  TopicSettings x;
  x.steps = {step("docs", "table_sync", {{"source", "env_a"}, {"target", "env_b"}, {"table", "t"}})};
  settings.topics["X"] = x;
  return app::PlannerConfigFrom(settings);
}

events::DueEvent Routed(int64_t id, const std::string& topic, const std::string& route) {
  events::DueEvent e = Events(1, topic, id).front();
  e.route = route;
  return e;
}

TEST(PlannerTest, PolicyListsEachForwardStepWithWhatItNeeds) {
  const PlannerConfig c = PerStepConfig();
  const TopicPolicy& g = c.topics.at("G");
  EXPECT_EQ(g.datasources, (std::vector<std::string>{"env_a", "env_b"}));
  ASSERT_EQ(g.steps.size(), 3u);
  EXPECT_EQ(g.steps[0].name, "del_a");
  EXPECT_EQ(g.steps[0].datasources, std::vector<std::string>{"env_a"});
  EXPECT_EQ(g.steps[1].datasources, std::vector<std::string>{"env_b"});
  EXPECT_TRUE(g.steps[2].datasources.empty());
}

TEST(PlannerTest, DirectTierIsPreferredWhenANodeReachesEveryDatasource) {
  for (Strategy strategy : kAllStrategies) {
    AssignmentPlanner p(PerStepConfig(strategy));
    // a:1 and b:1 each reach one side and are idle; c:1 reaches both and is busier:
    // still every event of G goes to c:1, handed-on ones (route env_b) included.
    NodeLoad both = Reaching("c:1", {"env_a", "env_b"}, 10);
    both.in_flight = 5;
    p.BeginCycle({Reaching("a:1", {"env_a"}), Reaching("b:1", {"env_b"}), both});
    EXPECT_TRUE(p.Unroutable().empty()) << StrategyName(strategy);
    std::vector<events::DueEvent> events = Events(3, "G");
    events.push_back(Routed(50, "G", "env_b"));
    EXPECT_EQ(PerNode(p.Plan(events)), (std::map<std::string, int>{{"c:1", 4}})) << StrategyName(strategy);
    EXPECT_FALSE(p.CanTake("a:1", Routed(51, "G", "env_a")));
    EXPECT_TRUE(p.CanTake("c:1", Routed(51, "G", "env_a")));
  }
}

TEST(PlannerTest, PerStepTierRoutesByTheEventsNextWorkWhenNoNodeReachesAll) {
  for (Strategy strategy : kAllStrategies) {
    AssignmentPlanner p(PerStepConfig(strategy));
    p.BeginCycle({Reaching("a:1", {"env_a"}), Reaching("b:1", {"env_b"})});
    EXPECT_EQ(p.Unroutable().count("G"), 0u) << StrategyName(strategy);
    // Fresh events (route NULL): the first step's datasources (env_a): node a only.
    EXPECT_EQ(PerNode(p.Plan(Events(3, "G"))), (std::map<std::string, int>{{"a:1", 3}})) << StrategyName(strategy);
    // Handed on with route env_b: node b only; route env_a: node a only.
    EXPECT_EQ(PerNode(p.Plan({Routed(10, "G", "env_b"), Routed(11, "G", "env_b")})),
              (std::map<std::string, int>{{"b:1", 2}}))
        << StrategyName(strategy);
    EXPECT_EQ(PerNode(p.Plan({Routed(12, "G", "env_a")})), (std::map<std::string, int>{{"a:1", 1}}));
    // The one place deciding it: a fresh event needs the first step's env_a.
    EXPECT_TRUE(p.CanTake("a:1", Routed(13, "G", "")));
    EXPECT_FALSE(p.CanTake("b:1", Routed(13, "G", "")));
    EXPECT_TRUE(p.CanTake("b:1", Routed(13, "G", "env_b")));
    // G is routable through both, and so is X, relayed (its step needs both at once: its
    // target's node runs it, its source half runs on a node reaching env_a).
    EXPECT_TRUE(p.NextPageFilter().blocked_topics.empty());
  }
}

TEST(PlannerTest, PerStepRouteWaitsForItsSideWhenThatSideIsFull) {
  AssignmentPlanner p(PerStepConfig());
  NodeLoad b = Reaching("b:1", {"env_b"}, 1);
  b.in_flight = 1;  // full, no prefetch
  p.BeginCycle({Reaching("a:1", {"env_a"}), b});
  PlanResult r = p.Plan({Routed(1, "G", "env_b"), Routed(2, "G", "env_a")});
  EXPECT_EQ(PerNode(r), (std::map<std::string, int>{{"a:1", 1}}));
  EXPECT_EQ(r.skipped_no_node, 1);  // the env_b one waits for b:1, never goes to a:1
  EXPECT_EQ(p.Unroutable().count("G"), 0u);  // routable: b:1 takes it once it has room
}

TEST(PlannerTest, UnroutableNamesTheStepAndWhatIsMissing) {
  AssignmentPlanner p(PerStepConfig());
  // Only env_a nodes: G's second step needs env_b, which no node reaches.
  p.BeginCycle({Reaching("a:1", {"env_a"}), Reaching("a:2", {"env_a"})});
  ASSERT_EQ(p.Unroutable().count("G"), 1u);
  const std::string& g = p.Unroutable().at("G");
  EXPECT_NE(g.find("reaches every datasource it needs (env_a,env_b)"), std::string::npos) << g;
  EXPECT_NE(g.find("step 'del_b' needs env_b, which no live node serving it reaches"), std::string::npos) << g;
  EXPECT_NE(g.find("a:1 lacks env_b"), std::string::npos) << g;
  // No event of G starts (it could never finish): blocked, not assigned.
  EXPECT_EQ(p.NextPageFilter().blocked_topics, (std::vector<std::string>{"G", "X"}));
  EXPECT_TRUE(p.Plan(Events(2, "G")).assignments.empty());

  // Only env_b nodes: X's table_sync could run relayed on them (its target), but no live
  // node reaches its source for the source half: unroutable, naming both sides.
  p.BeginCycle({Reaching("b:1", {"env_b"}), Reaching("b:2", {"env_b"})});
  ASSERT_EQ(p.Unroutable().count("X"), 1u);
  const std::string& x = p.Unroutable().at("X");
  EXPECT_NE(x.find("step 'docs' needs env_a, which no live node serving it reaches"), std::string::npos) << x;
  EXPECT_NE(x.find("b:1 lacks env_a"), std::string::npos) << x;
  EXPECT_TRUE(p.Plan(Events(1, "X", 100)).assignments.empty());

  // One node per side: G routes per step, and X runs relayed: its events go to the
  // node reaching its target (b:1), never to a:1, which only reaches its source.
  p.BeginCycle({Reaching("a:1", {"env_a"}), Reaching("b:1", {"env_b"})});
  EXPECT_EQ(p.Unroutable().count("G"), 0u);
  EXPECT_EQ(p.Unroutable().count("X"), 0u);
  EXPECT_EQ(PerNode(p.Plan(Events(2, "X", 100))), (std::map<std::string, int>{{"b:1", 2}}));
  EXPECT_FALSE(p.CanTake("a:1", Routed(102, "X", "")));
  EXPECT_TRUE(p.CanTake("b:1", Routed(102, "X", "env_a,env_b")));

  // A node reaching both joins: both topics run direct there.
  p.BeginCycle({Reaching("a:1", {"env_a"}), Reaching("b:1", {"env_b"}), Reaching("c:1", {"env_a", "env_b"})});
  EXPECT_TRUE(p.Unroutable().empty());
  EXPECT_EQ(PerNode(p.Plan({Routed(200, "X", ""), Routed(201, "G", "env_b")})),
            (std::map<std::string, int>{{"c:1", 2}}));
}

// The source half of a relayed step is an event of dsync's own topic, routed by its
// route (the step's source): only nodes reaching it take it, though the topic's plan
// names no datasource (so it runs "direct" on any node serving it).
TEST(PlannerTest, ARoutedEventOfADirectTopicGoesOnlyWhereItsRouteIsReached) {
  AssignmentPlanner p(PerStepConfig());
  p.BeginCycle({Reaching("a:1", {"env_a"}), Reaching("b:1", {"env_b"})});
  EXPECT_EQ(PerNode(p.Plan({Routed(300, "dsync.relay_source", "env_a"), Routed(301, "dsync.relay_source", "env_a")})),
            (std::map<std::string, int>{{"a:1", 2}}));
  EXPECT_FALSE(p.CanTake("b:1", Routed(302, "dsync.relay_source", "env_a")));
  EXPECT_TRUE(p.CanTake("b:1", Routed(303, "dsync.relay_source", "")));
}

}  // namespace
}  // namespace dsync::dispatcher
