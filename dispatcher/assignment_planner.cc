#include "dispatcher/assignment_planner.h"

#include <algorithm>
#include <limits>

#include "config/step_datasources.h"

namespace dsync::dispatcher {
namespace {

constexpr double kWeightedEpsilon = 0.001;  // seed 004: capacity / (load + 0.001)

// FNV-1a then the splitmix64 finaliser: stable across processes and builds
// (std::hash is not), and well mixed in every bit.
uint64_t StableHash(std::string_view a, std::string_view b) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : a) h = (h ^ c) * 1099511628211ULL;
  h = (h ^ 0x1f) * 1099511628211ULL;
  for (unsigned char c : b) h = (h ^ c) * 1099511628211ULL;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

std::string EntityKey(const events::DueEvent& e) { return e.tenant_id + '\x1f' + e.data_id; }

}  // namespace

std::optional<Strategy> ParseStrategy(std::string_view name) {
  if (name == "least_load") return Strategy::kLeastLoad;
  if (name == "weighted") return Strategy::kWeighted;
  if (name == "least_connections") return Strategy::kLeastConnections;
  if (name == "round_robin") return Strategy::kRoundRobin;
  if (name == "consistent_hash") return Strategy::kConsistentHash;
  return std::nullopt;
}

const char* StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kLeastLoad: return "least_load";
    case Strategy::kWeighted: return "weighted";
    case Strategy::kLeastConnections: return "least_connections";
    case Strategy::kRoundRobin: return "round_robin";
    case Strategy::kConsistentHash: return "consistent_hash";
  }
  return "least_load";
}

std::vector<std::string> TopicDatasources(const TopicSettings& topic) {
  std::vector<std::string> all;
  for (const StepSpec& step : topic.steps) {
    std::vector<std::string> names = StepDatasources(step);
    all.insert(all.end(), names.begin(), names.end());
  }
  return ParseRoute(RouteKey(std::move(all)));  // sorted, unique
}

bool AssignmentPlanner::Node::Reaches(const std::vector<std::string>& names) const {
  if (!load.datasources) return true;  // not reported: reaches every datasource
  for (const auto& ds : names) {
    if (std::find(load.datasources->begin(), load.datasources->end(), ds) == load.datasources->end()) return false;
  }
  return true;
}

AssignmentPlanner::AssignmentPlanner(PlannerConfig config) : config_(std::move(config)) {
  // issue 37: the limits are the config's, fixed for the planner's life; without any,
  // the cycle does no limit bookkeeping at all (no count read, no key read).
  for (const auto& [topic, policy] : config_.topics) {
    if (policy.concurrency_limit > 0) keyed_topics_[topic] = policy.concurrency_key;
  }
  has_limits_ = !config_.datasource_limits.empty() || !keyed_topics_.empty();
}

const TopicPolicy& AssignmentPlanner::PolicyFor(const std::string& topic) const {
  static const TopicPolicy kDefault;
  auto it = config_.topics.find(topic);
  return it == config_.topics.end() ? kDefault : it->second;
}

void AssignmentPlanner::BeginCycle(std::vector<NodeLoad> nodes, LimitUsage usage) {
  nodes_.clear();
  usage_ = std::move(usage);
  pairs_.clear();
  assigned_total_ = 0;
  assigned_per_topic_.clear();
  seen_entities_.clear();
  std::sort(nodes.begin(), nodes.end(),
            [](const NodeLoad& a, const NodeLoad& b) { return a.address < b.address; });
  for (auto& n : nodes) {
    if (n.draining) continue;
    Node node;
    node.load = std::move(n);
    node.load.capacity = std::max(1, node.load.capacity);
    node.load.prefetch = std::max(0, node.load.prefetch);
    node.all_topics = node.load.topics.empty();
    for (const auto& t : node.load.topics) {
      if (t == "*") node.all_topics = true;
      else node.topics.insert(t);
    }
    nodes_.push_back(std::move(node));
  }
  ComputeRouting();
}

void AssignmentPlanner::ComputeRouting() {
  unroutable_.clear();
  // The topics worth judging: configured ones, and any a node reports bad.
  std::set<std::string> topics;
  for (const auto& [topic, _] : config_.topics) topics.insert(topic);
  for (const auto& n : nodes_) {
    for (const auto& [topic, _] : n.load.bad_topics) topics.insert(topic);
  }
  for (const auto& topic : topics) {
    if (nodes_.empty()) {
      unroutable_[topic] = "no live node takes work";
      continue;
    }
    const TopicPolicy& policy = PolicyFor(topic);
    // serving: every node that would serve it (a node reporting the topic bad drops
    // it from an explicit list: name it, with why); eligible: those whose plan built.
    std::vector<Node*> serving, eligible;
    for (Node& n : nodes_) {
      const bool bad = n.load.bad_topics.count(topic) > 0;
      if (!n.Serves(topic) && !bad) continue;
      serving.push_back(&n);
      if (bad) {
        n.blocked.insert(topic);
      } else {
        eligible.push_back(&n);
      }
    }
    // Direct: a node reaching every datasource of the plan runs the whole saga.
    bool direct = false;
    for (const Node* n : eligible) direct = direct || n->Reaches(policy.datasources);
    if (direct) {
      for (Node* n : eligible) {
        if (!n->Reaches(policy.datasources)) n->blocked.insert(topic);
      }
      continue;
    }
    // Per step: only when every forward step has a node reaching all it needs.
    std::vector<TopicPolicy::Step> steps = policy.steps;
    if (steps.empty()) steps.push_back({"", policy.datasources});
    bool every_step = !eligible.empty();
    // Steps no live node reaches whole but that can run relayed: a node reaching the
    // target runs it, and some live node (serving the topic or not: the source half is
    // an event of its own topic) reaches the source.
    std::vector<const TopicPolicy::Step*> relayed;
    for (const auto& step : steps) {
      const bool taken = std::any_of(eligible.begin(), eligible.end(),
                                     [&](const Node* n) { return n->Reaches(step.datasources); });
      bool relay = false;
      if (!taken && !step.relayed.empty()) {
        relay = std::any_of(eligible.begin(), eligible.end(), [&](const Node* n) { return n->Reaches(step.relayed); }) &&
                std::any_of(nodes_.begin(), nodes_.end(), [&](const Node& n) { return n.Reaches(step.relay_source); });
        if (relay) relayed.push_back(&step);
      }
      every_step = every_step && (taken || relay);
    }
    if (every_step) {
      for (Node* n : eligible) {
        bool some_step = false;
        for (const TopicPolicy::Step& st : steps) some_step = some_step || n->Reaches(st.datasources);
        for (const TopicPolicy::Step* st : relayed) {
          if (n->Reaches(st->relayed)) {
            n->relays[topic].insert(RouteKey(st->datasources));
            some_step = true;
          }
        }
        if (some_step) {
          n->per_step.insert(topic);
        } else {
          n->blocked.insert(topic);
        }
      }
      continue;
    }
    for (Node* n : eligible) n->blocked.insert(topic);
    unroutable_[topic] = serving.empty() ? "no live node serves topic " + topic
                                         : UnreachedReason(topic, serving, eligible);
  }
}

std::string AssignmentPlanner::UnreachedReason(const std::string& topic, const std::vector<Node*>& serving,
                                               const std::vector<Node*>& eligible) const {
  const TopicPolicy& policy = PolicyFor(topic);
  const auto& needed = policy.datasources;
  // At most this many nodes are named in a reason; the rest are counted.
  constexpr size_t kNamedNodes = 4;
  std::string detail;
  for (size_t i = 0; i < serving.size(); ++i) {
    const Node& n = *serving[i];
    std::string why;
    auto bad = n.load.bad_topics.find(topic);
    if (bad != n.load.bad_topics.end()) {
      why = "plan failed: " + bad->second;
    } else {
      std::string lacks;
      for (const auto& ds : needed) {
        if (!n.Reaches({ds})) lacks += (lacks.empty() ? "" : ",") + ds;
      }
      why = "lacks " + lacks;
    }
    if (i < kNamedNodes) {
      detail += (detail.empty() ? "" : "; ") + n.load.address + " " + why;
    } else {
      detail += "; and " + std::to_string(serving.size() - kNamedNodes) + " more";
      break;
    }
  }
  if (eligible.empty()) {
    return "topic " + topic + "'s plan failed to build on every live node serving it: " + detail;
  }
  // The node detail first (as before per-step routing), then the first forward step
  // no node can take, and what it misses.
  std::string reason = "no live node serving topic " + topic + " reaches every datasource it needs (" +
                       RouteKey(needed) + "): " + detail;
  for (const auto& step : policy.steps) {
    const bool taken = std::any_of(eligible.begin(), eligible.end(),
                                   [&](const Node* n) { return n->Reaches(step.datasources); });
    if (taken) continue;
    std::vector<std::string> unreached;
    for (const auto& ds : step.datasources) {
      const bool someone = std::any_of(eligible.begin(), eligible.end(), [&](const Node* n) { return n->Reaches({ds}); });
      if (!someone) unreached.push_back(ds);
    }
    if (unreached.empty()) {
      // Each is reached by some node, never all by one: a later relay runs such a
      // step in halves; until then it waits.
      reason += "; step '" + step.name + "' needs " + SpokenList(step.datasources) +
                " together; no live node reaches " + (step.datasources.size() == 2 ? "both" : "all of them");
    } else {
      reason += "; step '" + step.name + "' needs " + SpokenList(unreached) + ", which no live node serving it reaches";
    }
    break;
  }
  return reason;
}

int AssignmentPlanner::free_slots() const {
  int64_t free = 0;
  for (const auto& n : nodes_) free += std::max<int64_t>(0, n.free());
  return static_cast<int>(std::min<int64_t>(free, std::numeric_limits<int>::max()));
}

int AssignmentPlanner::remaining() const {
  return std::max(0, std::min(free_slots(), config_.batch_size - assigned_total_));
}

bool AssignmentPlanner::Known(const std::string& topic) const {
  if (config_.topics.count(topic) > 0) return true;
  return std::any_of(nodes_.begin(), nodes_.end(), [&](const Node& n) { return n.Serves(topic); });
}

std::vector<std::string> AssignmentPlanner::UnorderedTopics() const {
  std::vector<std::string> out;
  for (const auto& [topic, policy] : config_.topics) {
    if (!policy.ordered) out.push_back(topic);
  }
  return out;
}

PageFilter AssignmentPlanner::NextPageFilter() const {
  PageFilter f;
  f.limit = remaining();
  std::set<std::string> served;
  for (const auto& n : nodes_) {
    if (n.free() <= 0) continue;
    if (n.all_topics) f.any_topic = true;
    for (const auto& t : n.topics) {
      if (n.CanRun(t)) served.insert(t);
    }
  }
  // Topics some free node serves that none of them can run: with a node serving
  // every topic they would otherwise be read, and wait at the head of each page.
  std::set<std::string> judged;
  for (const auto& [topic, _] : config_.topics) judged.insert(topic);
  for (const auto& n : nodes_) judged.insert(n.blocked.begin(), n.blocked.end());
  for (const auto& t : judged) {
    bool served_by_free = false, runnable = false;
    for (const auto& n : nodes_) {
      if (n.free() <= 0 || !n.Serves(t)) continue;
      served_by_free = true;
      if (n.CanRun(t)) runnable = true;
    }
    if (served_by_free && !runnable && t.find(',') == std::string::npos) f.blocked_topics.push_back(t);
  }
  for (const auto& t : served) {
    // FIND_IN_SET cannot match a name containing a comma; such a topic never
    // reaches the planner, so leave it out rather than split it.
    if (t.find(',') == std::string::npos) f.served_topics.push_back(t);
  }
  for (const auto& [topic, count] : assigned_per_topic_) {
    int limit = PolicyFor(topic).batch_limit;
    if (limit > 0 && count >= limit && topic.find(',') == std::string::npos) {
      f.exhausted_topics.push_back(topic);
    }
  }
  for (const auto& [topic, policy] : config_.topics) {
    if (!policy.ordered) f.unordered_topics.push_back(topic);
  }
  if (!config_.datasource_limits.empty()) {
    for (const auto& [topic, policy] : config_.topics) {
      events::DueEvent probe;
      probe.topic = topic;
      if (topic.find(',') == std::string::npos && !WithinLimits(probe, policy)) {
        f.limited_topics.push_back(topic);
      }
    }
  }
  return f;
}

std::map<std::string, int> AssignmentPlanner::assigned_per_node() const {
  std::map<std::string, int> out;
  for (const auto& n : nodes_) {
    if (n.assigned > 0) out[n.load.address] = n.assigned;
  }
  return out;
}

PlanResult AssignmentPlanner::Plan(const std::vector<events::DueEvent>& events) {
  PlanResult result;
  for (const events::DueEvent& e : events) PlanOne(e, result);
  return result;
}

bool AssignmentPlanner::PlanOne(const events::DueEvent& e, PlanResult& result) {
  const TopicPolicy& policy = PolicyFor(e.topic);
  // Every event marks its entity, assigned or not: a later event of the same
  // entity must not overtake it.
  bool first_of_entity = seen_entities_.insert(EntityKey(e)).second;
  if (policy.ordered && !first_of_entity) {
    ++result.skipped_ordered;
    return false;
  }
  if (assigned_total_ >= config_.batch_size) {
    ++result.skipped_budget;
    return false;
  }
  int& topic_count = assigned_per_topic_[e.topic];
  if (policy.batch_limit > 0 && topic_count >= policy.batch_limit) {
    ++result.skipped_topic_limit;
    return false;
  }
  if (!WithinLimits(e, policy)) {
    ++result.skipped_limit;
    return false;
  }
  int chosen = Choose(e, policy, NextWork(e));
  if (chosen < 0) {
    ++result.skipped_no_node;
    return false;
  }
  Node& node = nodes_[chosen];
  ++node.assigned;
  ++topic_count;
  ++assigned_total_;
  Hold(e, policy);
  if (policy.strategy == Strategy::kRoundRobin) round_robin_cursor_[e.topic] = node.load.address;
  result.assignments.push_back({e.id, e.version, node.load.address});
  return true;
}

// ---- issue 37: concurrency limits ----

bool AssignmentPlanner::WithinLimits(const events::DueEvent& e, const TopicPolicy& policy) const {
  if (!has_limits_) return true;
  for (const auto& ds : policy.datasources) {
    auto limit = config_.datasource_limits.find(ds);
    if (limit == config_.datasource_limits.end()) continue;
    auto held = usage_.per_datasource.find(ds);
    if (held != usage_.per_datasource.end() && held->second >= limit->second) return false;
  }
  if (policy.concurrency_limit > 0 && e.limit_key) {
    auto topic = usage_.per_key.find(e.topic);
    if (topic != usage_.per_key.end()) {
      auto held = topic->second.find(*e.limit_key);
      if (held != topic->second.end() && held->second >= policy.concurrency_limit) return false;
    }
  }
  return true;
}

void AssignmentPlanner::Hold(const events::DueEvent& e, const TopicPolicy& policy) {
  if (!has_limits_) return;
  for (const auto& ds : policy.datasources) {
    if (config_.datasource_limits.count(ds)) ++usage_.per_datasource[ds];
  }
  if (policy.concurrency_limit > 0 && e.limit_key) ++usage_.per_key[e.topic][*e.limit_key];
}

// ---- issue 37: fair dispatch ----

bool AssignmentPlanner::Budget() const { return assigned_total_ < config_.batch_size && free_slots() > 0; }

int AssignmentPlanner::WeightOf(const std::string& tenant) const {
  auto it = config_.tenant_weights.find(tenant);
  return it == config_.tenant_weights.end() ? 1 : std::max(1, it->second);
}

void AssignmentPlanner::BeginFairCycle(std::vector<TenantHead> heads) {
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  pairs_.clear();
  for (const auto& h : heads) pairs_.push_back({h});
  // An idle pair keeps no credit (DRR).
  for (auto it = deficit_.begin(); it != deficit_.end();) {
    const bool listed = std::binary_search(heads.begin(), heads.end(), TenantHead{it->first.first, it->first.second});
    it = listed ? std::next(it) : deficit_.erase(it);
  }
}

std::vector<TenantWindow> AssignmentPlanner::NextWindows() const {
  std::vector<TenantWindow> out;
  const int budget = remaining();
  if (budget <= 0) return out;
  // The most urgent priority with a pair left.
  auto first = std::find_if(pairs_.begin(), pairs_.end(), [](const Pair& p) { return !p.done; });
  if (first == pairs_.end()) return out;
  const int priority = first->head.priority;
  std::vector<const Pair*> level;
  for (auto it = first; it != pairs_.end() && it->head.priority == priority; ++it) {
    if (!it->done) level.push_back(&*it);
  }
  // This round's order: from the pair the round stopped at, wrapping.
  size_t start = 0;
  if (auto at = round_start_.find(priority); at != round_start_.end()) {
    while (start < level.size() && level[start]->head.tenant_id < at->second) ++start;
    if (start == level.size()) start = 0;
  }
  const size_t n = std::min(level.size(), kMaxWindows);
  int64_t weights = 0;
  for (size_t k = 0; k < n; ++k) weights += WeightOf(level[(start + k) % level.size()]->head.tenant_id);
  for (size_t k = 0; k < n; ++k) {
    const Pair& p = *level[(start + k) % level.size()];
    // Its share of the budget and one more (a deficit carried over), or the whole
    // budget when alone: a short window only costs another page.
    int64_t share = n == 1 ? budget : (int64_t{budget} * WeightOf(p.head.tenant_id) + weights - 1) / weights + 1;
    out.push_back({p.head.priority, p.head.tenant_id, p.after_id, static_cast<int>(std::min<int64_t>(share, budget))});
  }
  return out;
}

PlanResult AssignmentPlanner::PlanWindows(const std::vector<TenantWindow>& windows,
                                          const std::vector<events::DueEvent>& events) {
  PlanResult result;
  if (windows.empty()) return result;
  // Each window's events in id order.
  std::vector<std::vector<const events::DueEvent*>> queues(windows.size());
  std::map<std::pair<int, std::string>, size_t> index;
  for (size_t i = 0; i < windows.size(); ++i) index[{windows[i].priority, windows[i].tenant_id}] = i;
  for (const events::DueEvent& e : events) {
    auto it = index.find({e.priority, e.tenant_id});
    if (it != index.end()) queues[it->second].push_back(&e);
  }
  std::vector<bool> more(windows.size());  // the pair may hold more than was read
  for (size_t i = 0; i < windows.size(); ++i) {
    auto& q = queues[i];
    std::sort(q.begin(), q.end(), [](const events::DueEvent* a, const events::DueEvent* b) { return a->id < b->id; });
    more[i] = static_cast<int>(q.size()) >= windows[i].limit;
    result.window_full = result.window_full || more[i];
    auto pair = std::lower_bound(pairs_.begin(), pairs_.end(), TenantHead{windows[i].priority, windows[i].tenant_id},
                                 [](const Pair& p, const TenantHead& h) { return p.head < h; });
    if (pair == pairs_.end() || !(pair->head == TenantHead{windows[i].priority, windows[i].tenant_id})) continue;
    if (!q.empty()) pair->after_id = q.back()->id;
    if (!more[i]) pair->done = true;
  }
  const int priority = windows.front().priority;
  // Deficit round robin over the windows, in the order given (NextWindows starts at
  // the pair the last round stopped at).
  std::vector<size_t> next(windows.size(), 0);  // position in each queue
  bool first_round = true;
  while (true) {
    bool any = false;
    for (size_t i = 0; i < windows.size(); ++i) {
      if (next[i] >= queues[i].size()) continue;
      any = true;
      double& deficit = deficit_[{priority, windows[i].tenant_id}];
      const int weight = WeightOf(windows[i].tenant_id);
      // A pair the last cycle stopped on already had this round's quantum.
      const std::pair<int, std::string> key{priority, windows[i].tenant_id};
      if (first_round && resume_ == key) {
        resume_.reset();
      } else {
        deficit += weight;
      }
      while (deficit >= 1 && next[i] < queues[i].size()) {
        if (!Budget()) {
          round_start_[priority] = windows[i].tenant_id;
          resume_ = key;
          result.skipped_budget += static_cast<int>(queues[i].size() - next[i]);
          for (size_t j = 0; j < windows.size(); ++j) {
            if (j != i) result.skipped_budget += static_cast<int>(queues[j].size() - next[j]);
          }
          return result;
        }
        if (PlanOne(*queues[i][next[i]++], result)) deficit -= 1;
      }
      if (next[i] >= queues[i].size()) {
        // Window used up: DRR's empty queue keeps no credit; one read only in part
        // keeps at most a quantum for its next window.
        deficit = more[i] ? std::min<double>(deficit, weight) : 0;
      }
    }
    first_round = false;
    if (!any) break;
  }
  // Every window is used up: the next round starts after the last pair served.
  round_start_[priority] = windows.back().tenant_id + '\x01';
  resume_.reset();
  return result;
}

std::vector<std::string> AssignmentPlanner::NextWork(const events::DueEvent& e) const {
  if (!e.route.empty()) return ParseRoute(e.route);
  const TopicPolicy& policy = PolicyFor(e.topic);
  return policy.steps.empty() ? policy.datasources : policy.steps.front().datasources;
}

bool AssignmentPlanner::CanTake(const std::string& address, const events::DueEvent& e) const {
  const std::vector<std::string> needs = NextWork(e);
  return std::any_of(nodes_.begin(), nodes_.end(),
                     [&](const Node& n) { return n.load.address == address && n.CanTake(e.topic, needs, !e.route.empty()); });
}

int AssignmentPlanner::Choose(const events::DueEvent& e, const TopicPolicy& policy, const std::vector<std::string>& needs) {
  int best = ChooseAmong(e, policy, needs, /*use_prefetch=*/false);
  return best >= 0 ? best : ChooseAmong(e, policy, needs, /*use_prefetch=*/true);
}

int AssignmentPlanner::ChooseAmong(const events::DueEvent& e, const TopicPolicy& policy,
                                   const std::vector<std::string>& needs, bool use_prefetch) {
  auto usable = [&](const Node& n) {
    return (use_prefetch ? n.free() : n.free_within_capacity()) > 0 && n.CanTake(e.topic, needs, !e.route.empty());
  };
  int best = -1;
  switch (policy.strategy) {
    case Strategy::kLeastLoad: {
      // (in_flight + assigned) / capacity, compared exactly by cross-multiplying.
      for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
        const Node& n = nodes_[i];
        if (!usable(n)) continue;
        if (best < 0) { best = i; continue; }
        const Node& b = nodes_[best];
        int64_t lhs = (int64_t{n.load.in_flight} + n.assigned) * b.load.capacity;
        int64_t rhs = (int64_t{b.load.in_flight} + b.assigned) * n.load.capacity;
        if (lhs < rhs) best = i;
      }
      return best;
    }
    case Strategy::kWeighted: {
      double best_score = 0;
      for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
        const Node& n = nodes_[i];
        if (!usable(n)) continue;
        double cap = n.load.capacity;
        double projected = std::max(0.0, n.load.load) + n.assigned / cap;
        double score = std::max(0.0, n.load.weight) * cap / (projected + kWeightedEpsilon);
        if (best < 0 || score > best_score) {
          best = i;
          best_score = score;
        }
      }
      return best;
    }
    case Strategy::kLeastConnections: {
      for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
        const Node& n = nodes_[i];
        if (!usable(n)) continue;
        if (best < 0 || int64_t{n.load.processing_count} + n.assigned <
                            int64_t{nodes_[best].load.processing_count} + nodes_[best].assigned) {
          best = i;
        }
      }
      return best;
    }
    case Strategy::kRoundRobin: {
      // The first usable node after the cursor's address, wrapping around. By
      // address rather than index, so nodes joining or leaving keep the rotation.
      auto it = round_robin_cursor_.find(e.topic);
      const std::string* cursor = it == round_robin_cursor_.end() ? nullptr : &it->second;
      int first = -1;
      for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
        if (!usable(nodes_[i])) continue;
        if (first < 0) first = i;
        if (cursor == nullptr || nodes_[i].load.address > *cursor) return i;
      }
      return first;
    }
    case Strategy::kConsistentHash: {
      // Rendezvous: the node with the highest hash(key, address) among those serving
      // the topic, skipping full ones. Adding a node moves only the keys it now wins.
      const std::string key = EntityKey(e);
      uint64_t best_hash = 0;
      for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
        const Node& n = nodes_[i];
        if (!usable(n)) continue;
        uint64_t h = StableHash(key, n.load.address);
        if (best < 0 || h > best_hash) {
          best = i;
          best_hash = h;
        }
      }
      return best;
    }
  }
  return best;
}

}  // namespace dsync::dispatcher
