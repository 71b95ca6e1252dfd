// Pure assignment logic of the dispatcher: given the live nodes with their load and a
// page of due PENDING events, decides which node gets which event. No SQL, no clock;
// the cycle (dispatcher/dispatch_cycle.h) reads its inputs and writes its output.
//
//   AssignmentPlanner planner(app::PlannerConfigFrom(settings));   // app/options.h
//   planner.BeginCycle(nodes);                        // once per cycle
//   PlanResult r = planner.Plan(page);                // per page read, in (priority, id) order
//   PageFilter f = planner.NextPageFilter();          // what the next page should read
//
// Rules, per cycle:
//   - draining nodes get nothing; free slots = capacity + prefetch - in_flight (from
//     the event table) - assigned this cycle, and no node ever gets more than its
//     free slots. Prefetch room (a node holding events beyond its capacity, queued
//     for its next free worker) is used only when no eligible node has room within
//     its capacity; strategies rank nodes as if prefetch did not exist (least_load
//     stays (in_flight + assigned) / capacity);
//   - a node serves an event's topic when its topics contain it or "*" (no topics at
//     all also means every topic) and the topic is not among its bad_topics (its plan
//     failed to build there). A node that reports no datasources at all (an older
//     version) counts as reaching every one;
//   - routing by the next piece of work, per topic per cycle (two tiers):
//       direct:   some live non-draining node serving the topic reaches every
//                 datasource of its plan (TopicPolicy::datasources): only such nodes
//                 are candidates, for every event of the topic (the whole saga runs
//                 on one node, as before per-step routing);
//       per step: else the candidates for an event are the nodes serving the topic
//                 that reach what its next step needs (events::DueEvent::route, set by
//                 the node that handed it on; for a fresh event, route NULL, the first
//                 forward step's datasources, TopicPolicy::steps). The node running
//                 the saga hands the event on before a step it does not reach
//                 (saga/event_run.h), so its steps run on different nodes;
//     a topic takes the per-step tier only when every forward step has some live node
//     reaching all it needs (else no event of it would finish: none starts);
//   - a topic no live non-draining node can run (no node serves it, its plan fails
//     on every node serving it, or neither tier finds takers: the reason names the
//     step and the datasources missing) is unroutable: Unroutable() names it with the
//     reason, and NextPageFilter() keeps its events out of the page (as it does for
//     topics no node with a free slot can take), so they never fill a page ahead of
//     events that can run. CanTake() is the one place that decides who may take an
//     event (a later relay of a step's halves extends it);
//   - at most `batch_size` assignments per cycle, and at most the topic's batch_limit
//     (0: batch_size) per topic;
//   - ordered topics: an event is skipped when an earlier event of the same
//     (tenant_id, data_id), of any topic, was seen earlier in this cycle (assigned or
//     not). Earlier events in the database are the cycle's SQL filter's business.
//   - topics missing from the config are planned with the defaults (least_load,
//     ordered, no per-topic limit): the consumer owns topic definitions, and a node
//     serving the topic (or "*") records the error if it does not know it either.
//   - concurrency limits (issue 37, docs/fairness-and-limits.md): an event holds one slot
//     of every limited datasource its topic's plan names (TopicPolicy::datasources), and
//     one slot of its topic's concurrency key value (TopicPolicy::concurrency_limit),
//     from its assignment until it leaves ASSIGNED/RUNNING/COMPENSATING by any path. The
//     cycle reads what is held from the database (LimitUsage, every in-flight event of
//     the service, live nodes or not); an event whose slot is not free is skipped
//     (skipped_limit), and topics with a full datasource are kept out of the next page
//     (PageFilter::limited_topics). An event whose key value is missing (nullopt) is not
//     limited by the key.
// Fair dispatch (issue 37; PlannerConfig::fair, on by default as in the config): instead of
// Plan() over pages in (priority, id) order, the cycle reads the (priority, tenant)
// pairs that have PENDING events (BeginFairCycle), then pages of per-pair windows
// (NextWindows: at most kMaxWindows pairs of the most urgent priority with a pair left,
// each window at most remaining() events after the pair's cursor), and PlanWindows()
// shares the assignments among the pairs by deficit round robin: each round a pair
// with events adds its tenant's weight (PlannerConfig::tenant_weights, default 1) to
// its deficit and takes events while its deficit is at least 1, one per assignment.
// Deficits and the round's position persist across cycles (a cycle cut short by the
// budget resumes at the pair it stopped on, without a new quantum), so over any stretch
// where tenants keep due events, each gets its weight's share of the assignments to
// within one quantum each, however small each cycle's budget is. A pair whose window
// came back short has nothing more readable this cycle: its deficit is dropped (as
// DRR drops an idle flow's), and when every pair of a priority is so, the next page
// reads the next priority. Priorities keep their meaning (a less urgent pair is read
// only when the more urgent ones have nothing placeable left); the ordering rule is
// per (tenant, data_id), within one tenant's pair, and is unchanged.
// Strategies (per topic; ties always go to the smaller address):
//   least_load         min (in_flight + assigned) / capacity
//   weighted           max weight * capacity / (load + assigned / capacity + 0.001), the
//                      seed's formula with this cycle's assignments added to the node's
//                      reported load; within a cycle a node's share grows with
//                      capacity^2 * weight (use least_load for a share by capacity)
//   least_connections  min processing_count (node-reported) + assigned
//   round_robin        next node after the topic's cursor, by address; the cursor
//                      persists across cycles
//   consistent_hash    rendezvous hashing of (tenant_id, data_id) over the nodes
//                      serving the topic; when the top node is full, the next by hash
//
// Thread safety: not thread-safe; one cycle at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "config/settings.h"
#include "config/step_datasources.h"
#include "events/assign.h"

namespace dsync::dispatcher {

enum class Strategy { kLeastLoad, kWeighted, kLeastConnections, kRoundRobin, kConsistentHash };

// "least_load", ...; nullopt for an unknown name.
std::optional<Strategy> ParseStrategy(std::string_view name);
const char* StrategyName(Strategy s);

struct TopicPolicy {
  Strategy strategy = Strategy::kLeastLoad;
  bool ordered = true;
  int batch_limit = 0;  // assignments of the topic per cycle; 0: only batch_size applies
  // Datasources the topic's plan uses (TopicDatasources): a node reaching them all
  // runs the whole saga (the direct tier).
  std::vector<std::string> datasources;
  // The forward steps in plan order, each with what it needs (StepDatasources), for
  // the per-step tier. Empty (a policy built without them): one piece of work needing
  // `datasources`, that is the direct tier only.
  struct Step {
    std::string name;
    std::vector<std::string> datasources;
    // Relayable steps (table_sync): when no live node reaches all of `datasources`, a
    // node reaching `relayed` (its target) runs it relayed, provided a node reaching
    // `relay_source` (its source) is live for the source half (RelayedDatasources).
    std::vector<std::string> relayed{};
    std::vector<std::string> relay_source{};
  };
  std::vector<Step> steps;
  // issue 37: per-key concurrency limit. concurrency_key as configured ("tenant_id",
  // "data_id", "payload.a.b"; "" none); concurrency_limit 0: none.
  std::string concurrency_key{};
  int concurrency_limit = 0;
};

struct PlannerConfig {
  int batch_size = 500;                       // assignments per cycle, all topics
  std::map<std::string, TopicPolicy> topics;  // configured topics; others get TopicPolicy{}
  // issue 37.
  bool fair = true;                           // fairness.enabled, default true as in the config
  std::map<std::string, int> tenant_weights;  // fairness.weights; others weigh 1
  std::map<std::string, int> datasource_limits;  // datasources.<name>.max_concurrent_steps
};

// In-flight events holding limited slots, as the database says at cycle start (issue 37).
struct LimitUsage {
  std::map<std::string, int64_t> per_datasource;  // limited datasource -> events holding it
  std::map<std::string, std::map<std::string, int64_t>> per_key;  // topic -> key value -> events
};

// A (priority, tenant) with PENDING events, and what a fair page reads of it.
using TenantHead = events::DueHead;
using TenantWindow = events::DueWindow;

// The datasources a topic's plan names, sorted and unique: the union of its steps'
// StepDatasources (config/step_datasources.h: `source` and `target` of table_sync and
// table_verify steps, `target` of table_delete steps; other step types, demo and
// custom ones, name none that the dispatcher could know of).
std::vector<std::string> TopicDatasources(const TopicSettings& topic);

// A live node as the cycle sees it.
struct NodeLoad {
  std::string address;
  bool draining = false;
  int capacity = 1;             // metadata.capacity (>= 1)
  int prefetch = 0;             // metadata.prefetch (>= 0): may hold this many beyond capacity
  int in_flight = 0;            // ASSIGNED + RUNNING + COMPENSATING rows: the truth
  int processing_count = 0;     // metadata, node-reported
  double load = 0.0;            // metadata, node-reported
  double weight = 1.0;          // metadata
  std::vector<std::string> topics;  // empty or containing "*": every topic
  // Datasources the node reaches; nullopt: not reported (an older node), reaching all.
  std::optional<std::vector<std::string>> datasources;
  std::map<std::string, std::string> bad_topics;  // topic -> why its plan failed there
};

struct Assignment {
  int64_t event_id = 0;
  int64_t version = 0;  // as read; the write is conditional on it
  std::string node_address;
};

struct PlanResult {
  std::vector<Assignment> assignments;  // in input order
  int skipped_ordered = 0;      // an earlier event of the entity came first this cycle
  int skipped_topic_limit = 0;  // the topic's batch_limit was reached
  int skipped_no_node = 0;      // no eligible node has a free slot
  int skipped_budget = 0;       // the cycle's batch_size was reached
  int skipped_limit = 0;        // a datasource's or the key's concurrency limit was full
  // PlanWindows: some window came back full (its pair may hold more events).
  bool window_full = false;
};

// What the next page of due events should be restricted to, so that events nobody
// can take now do not fill the page (head-of-line blocking).
struct PageFilter {
  bool any_topic = false;                      // a node with a free slot serves every topic
  std::vector<std::string> served_topics;      // topics of nodes with a free slot
  std::vector<std::string> exhausted_topics;   // topics at their batch_limit this cycle
  std::vector<std::string> unordered_topics;   // configured with ordered = false
  // Topics no node with a free slot can run (datasources not reached, plan bad
  // there): kept out of the page like exhausted_topics.
  std::vector<std::string> blocked_topics;
  // Topics a datasource of which is at its max_concurrent_steps (issue 37): kept out too.
  std::vector<std::string> limited_topics;
  int limit = 0;                               // remaining(): events worth reading
};

class AssignmentPlanner {
 public:
  explicit AssignmentPlanner(PlannerConfig config);

  // Starts a cycle: forgets this cycle's assignments and seen entities, keeps the
  // round-robin cursors and the fair rotation. `usage`: the limited slots held now.
  void BeginCycle(std::vector<NodeLoad> nodes, LimitUsage usage = {});
  // Plans events (in priority, id order) against what is left of this cycle.
  PlanResult Plan(const std::vector<events::DueEvent>& events);

  // Fair dispatch (see the file comment). After BeginCycle: the pairs with PENDING
  // events (any order); forgets deficits of pairs no longer listed.
  void BeginFairCycle(std::vector<TenantHead> heads);
  // The windows the next page reads, in this round's order; empty: nothing left to
  // read this cycle (no budget, or every pair's window came back short).
  std::vector<TenantWindow> NextWindows() const;
  // Plans the events read for `windows` (NextWindows()'s, any order of events).
  PlanResult PlanWindows(const std::vector<TenantWindow>& windows, const std::vector<events::DueEvent>& events);
  // Most pairs one fair page reads (one UNION ALL statement).
  static constexpr size_t kMaxWindows = 32;
  bool fair() const { return config_.fair; }
  // Whether any concurrency limit is configured (the cycle reads LimitUsage only then).
  bool HasLimits() const { return has_limits_; }
  // Topics with a per-key limit, and their key.
  const std::map<std::string, std::string>& KeyedTopics() const { return keyed_topics_; }
  // Assignments still possible this cycle: min(free slots of non-draining nodes,
  // batch_size - assigned).
  int remaining() const;
  // Free slots of non-draining nodes left this cycle (batch_size aside).
  int free_slots() const;
  PageFilter NextPageFilter() const;

  const TopicPolicy& PolicyFor(const std::string& topic) const;
  // What the event's next piece of work needs: its route, or (route NULL) the first
  // forward step's datasources (all of the topic's without TopicPolicy::steps).
  std::vector<std::string> NextWork(const events::DueEvent& e) const;
  // Whether the node at `address` may take `e` this cycle, free slots aside (the tier
  // rules above). False for an address not live and non-draining.
  bool CanTake(const std::string& address, const events::DueEvent& e) const;
  // Topics no live non-draining node of this cycle can run, with a one-line reason
  // each ("no live node serves topic T"; "no live node serving topic T reaches every
  // datasource it needs (env_a,env_b): a:1 lacks env_b; b:1 lacks env_a; step 'docs'
  // needs env_a and env_b together; no live node reaches both"; "...; step 'docs'
  // needs env_c, which no live node serving it reaches"; "topic T's plan failed to
  // build on every live node serving it: a:1 plan failed: ..."). Considers the configured topics and
  // every topic a node reports bad; free slots do not matter (a busy node can still
  // run the topic later). With no live non-draining node at all, every such topic
  // is unroutable ("no live node takes work").
  const std::map<std::string, std::string>& Unroutable() const { return unroutable_; }
  // Assignments made this cycle, per node address.
  std::map<std::string, int> assigned_per_node() const;
  // Whether the topic is known to this cycle: configured, or served (explicitly or by
  // "*") by a live non-draining node. Events of a topic that is neither are never
  // given to any node (DispatchCycle records them as unknown_topic).
  bool Known(const std::string& topic) const;
  // Configured topics with ordered = false, sorted.
  std::vector<std::string> UnorderedTopics() const;

 private:
  struct Node {
    NodeLoad load;
    bool all_topics = false;
    std::set<std::string> topics;
    int assigned = 0;
    // Room left, prefetch included.
    int64_t free() const {
      return int64_t{load.capacity} + load.prefetch - load.in_flight - assigned;
    }
    // Room left within capacity alone.
    int64_t free_within_capacity() const {
      return int64_t{load.capacity} - load.in_flight - assigned;
    }
    bool Serves(const std::string& topic) const { return all_topics || topics.count(topic) > 0; }
    // Topics this node serves but cannot run (a datasource it lacks, a bad plan).
    std::set<std::string> blocked;
    // Topics routed per step this cycle that this node can run some step of: it takes
    // an event of them only when it reaches the event's next work.
    std::set<std::string> per_step;
    // Per-step topics: the next work (a RouteKey) no live node reaches whole, that this
    // node may run relayed (it reaches the step's target).
    std::map<std::string, std::set<std::string>> relays;
    bool CanRun(const std::string& topic) const {
      return Serves(topic) && (blocked.empty() || blocked.count(topic) == 0);
    }
    bool Reaches(const std::vector<std::string>& names) const;
    // CanRun, and for a per-step topic reaching `needs` (the event's next work) or
    // running it relayed; for a topic run direct, reaching the event's route when it has
    // one (the source half of a relayed step: its route is the source).
    bool CanTake(const std::string& topic, const std::vector<std::string>& needs, bool routed) const {
      if (!CanRun(topic)) return false;
      if (per_step.count(topic) == 0) return !routed || Reaches(needs);
      if (Reaches(needs)) return true;
      auto r = relays.find(topic);
      return r != relays.end() && r->second.count(RouteKey(needs)) > 0;
    }
  };

  // Fills each node's `blocked` and unroutable_ (BeginCycle).
  void ComputeRouting();

  // Index into nodes_ of the node for `e`, or -1: among nodes with room within their
  // capacity, else (prefetch) among nodes with any room.
  // `needs`: NextWork(e).
  int Choose(const events::DueEvent& e, const TopicPolicy& policy, const std::vector<std::string>& needs);
  int ChooseAmong(const events::DueEvent& e, const TopicPolicy& policy, const std::vector<std::string>& needs,
                  bool use_prefetch);
  // The reason a topic with serving nodes (some not bad) cannot be routed by either
  // tier; `eligible` are the serving nodes whose plan built.
  std::string UnreachedReason(const std::string& topic, const std::vector<Node*>& serving,
                              const std::vector<Node*>& eligible) const;

  // Plan()'s per-event rules; true when `e` was assigned.
  bool PlanOne(const events::DueEvent& e, PlanResult& result);
  // issue 37: whether `e`'s limited slots are free; Hold takes them.
  bool WithinLimits(const events::DueEvent& e, const TopicPolicy& policy) const;
  void Hold(const events::DueEvent& e, const TopicPolicy& policy);
  // Assignments are still possible this cycle (batch_size and some free slot).
  bool Budget() const;
  int WeightOf(const std::string& tenant) const;

  const PlannerConfig config_;
  std::map<std::string, std::string> keyed_topics_;  // KeyedTopics(), from config_
  bool has_limits_ = false;                          // HasLimits(), from config_
  std::vector<Node> nodes_;  // non-draining only, by address
  LimitUsage usage_;         // this cycle's, assignments included
  // Fair dispatch. Per cycle: the pairs, sorted, with their read cursor.
  struct Pair {
    TenantHead head;
    int64_t after_id = 0;
    bool done = false;  // its window came back short: nothing more readable this cycle
  };
  std::vector<Pair> pairs_;
  // Across cycles: each pair's deficit, and per priority the pair (tenant) the next
  // round starts at; resume_: the pair a cycle's budget stopped on, which already had
  // this round's quantum.
  std::map<std::pair<int, std::string>, double> deficit_;
  std::map<int, std::string> round_start_;
  std::optional<std::pair<int, std::string>> resume_;
  int assigned_total_ = 0;
  std::map<std::string, int> assigned_per_topic_;
  std::unordered_set<std::string> seen_entities_;
  std::map<std::string, std::string> round_robin_cursor_;  // topic -> last address
  std::map<std::string, std::string> unroutable_;  // topic -> reason, this cycle
};

}  // namespace dsync::dispatcher
