#include "app/commands.h"

#include "app/bundle_command.h"
#include "app/capture_command.h"
#include "app/command_support.h"
#include "app/component_metrics.h"
#include "app/control_commands.h"
#include "app/options.h"
#include "app/verify_command.h"
#include "api/event_store.h"
#include "api/http_server.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "config/settings.h"
#include "config/step_datasources.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "consumer/consumer_node.h"
#include "dispatcher/dispatch_cycle.h"
#include "dispatcher/dispatcher_service.h"
#include "dispatcher/dispatcher_waker.h"
#include "events/rows.h"
#include "saga/commit_group.h"
#include "saga/saga_engine.h"
#include "saga/steps/table_steps.h"
#include "saga/step_handler.h"
#include "registry/heartbeat_publisher.h"
#include "registry/node_directory.h"
#include "registry/offline_sweeper.h"
#include "storage/connection_pool.h"
#include "storage/migrator.h"

namespace dsync::app {
namespace {

// consumer.prefetch in the start lines: the number, or "auto" for -1.
std::string PrefetchText(int prefetch) { return prefetch < 0 ? "auto" : std::to_string(prefetch); }

// --- migrate ---------------------------------------------------------------

int RunMigrate(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(s.log_level, "migrate");
  storage::ConnectionPool pool(DatabaseUrl(s));
  storage::Migrator migrator(pool);
  migrator.set_default_service(s.service);
  if (migrator.CreateSchemaIfMissing()) std::cout << "created schema " << pool.url().schema << "\n";
  auto result = migrator.Migrate();
  if (result.applied.empty()) {
    std::cout << "schema already at version " << result.to_version << "\n";
  } else {
    std::cout << "schema migrated from version " << result.from_version << " to " << result.to_version
              << "\n";
  }
  // Which service a plain INSERT that names none belongs to (V014's column default).
  if (auto column_default = pool.Run("read the service default",
                                     [](storage::Connection& c) { return events::ReadDefaultService(c); })) {
    std::cout << "a plain INSERT INTO distribute_event that names no service belongs to service '"
              << *column_default << "' (the column default)";
    if (*column_default != s.service) {
      std::cout << "; this config's service is '" << s.service << "', whose dispatchers never run them (change it: "
                << "ALTER TABLE distribute_event ALTER COLUMN service SET DEFAULT '" << s.service << "')";
    }
    std::cout << "\n";
  }
  return 0;
}

// One WARN line at the start of a node or dispatcher whose service is not the one a
// plain INSERT gets (the column default of distribute_event.service): those events
// are another service's and this process never runs them. Never throws: a failed
// read is logged and the start goes on.
void WarnIfNotDefaultService(storage::ConnectionPool& pool, const std::string& service, const char* role) {
  try {
    auto column_default =
        pool.Run("read the service default", [](storage::Connection& c) { return events::ReadDefaultService(c); });
    if (!column_default || *column_default == service) return;
    spdlog::warn("SERVICE_NOT_DEFAULT role={} service={} column_default={} hint=\"a plain INSERT INTO "
                 "distribute_event that names no service belongs to {}, not to this {}: name the service in the "
                 "INSERT, or ALTER TABLE distribute_event ALTER COLUMN service SET DEFAULT '{}'\"",
                 role, service, *column_default, *column_default, role, service);
  } catch (const Error& e) {
    spdlog::warn("SERVICE_DEFAULT_UNREAD role={} service={} err={}", role, service, e.what());
  }
}

// --- node ------------------------------------------------------------------

// Database connections for a node's part of a process: one per worker up to
// kNodeWorkerConnections, plus the poller, the heartbeat and hand-backs. A node of
// capacity 1,000 used to open 1,003 (~50 KB of RSS each, in a burst when work
// arrived); past the cap, workers wait for a connection (storage::PoolOptions::
// borrow_timeout, then DbError kPoolExhausted) rather than open one. REQUIRES of the
// node's code: nothing waits for a second connection (or for another thread that
// needs one) while holding one, or a full pool could stall until borrow_timeout. A
// larger url pool_size still wins.
constexpr int kNodeWorkerConnections = 32;
int NodeConnections(int capacity) { return std::min(capacity, kNodeWorkerConnections) + 4; }

// The node's identity (flags) on top of its options from the settings. Throws UsageError.
consumer::ConsumerOptions NodeOptions(const Invocation& inv, const Settings& s) {
  consumer::ConsumerOptions options = ConsumerOptionsFrom(s);
  options.node_address = inv.Get("node-address").value_or(Hostname() + ":" + std::to_string(getpid()));
  CheckHostPort("node-address", options.node_address);
  if (auto t = inv.Get("topics")) {
    options.topics = SplitList(*t);
    if (options.topics.empty()) throw UsageError("--topics needs at least one topic name");
    for (const auto& topic : options.topics) {
      if (topic != "*" && !s.topics.empty() && !s.topics.count(topic)) {
        throw UsageError("--topics: unknown topic '" + topic + "' (not in the config)");
      }
    }
  } else {
    for (const auto& [name, _] : s.topics) options.topics.push_back(name);
  }
  if (options.topics.empty()) options.topics.push_back("*");
  // The datasources this node checks and reports: the config's, or those named.
  std::map<std::string, std::string> datasources = s.datasources;
  if (auto d = inv.Get("datasources")) {
    std::vector<std::string> names = SplitList(*d);
    if (names.empty()) throw UsageError("--datasources needs at least one datasource name");
    datasources.clear();
    for (const auto& name : names) {
      auto it = s.datasources.find(name);
      if (it == s.datasources.end()) {
        std::string known;
        for (const auto& [n, _] : s.datasources) known += (known.empty() ? "" : ", ") + n;
        throw UsageError("--datasources: unknown datasource '" + name + "' (the config has: " +
                         (known.empty() ? "none" : known) + ")");
      }
      datasources.insert(*it);
    }
  }
  options.datasources = std::move(datasources);
  return options;
}

// The topics whose plan builds, and the others with the reason (the ConfigError
// naming the step). A bad topic does not stop the node: it serves the others and
// reports the bad ones (heartbeat `bad_topics`, `dsync nodes`), and the dispatcher
// sends it none of their events. Drops the bad topics from an explicit topic list, so
// that a dispatcher of an older version does not send them either (a node serving
// "*" relies on `bad_topics`). Throws ConfigError (exit 2, before connecting) when
// no topic this node would serve is left.
std::map<std::string, TopicSettings> BuildableTopics(const Settings& s, consumer::ConsumerOptions& options) {
  const saga::StepRegistry registry = saga::StepRegistry::WithBuiltins();
  std::map<std::string, TopicSettings> good;
  for (const auto& [name, topic] : s.topics) {
    try {
      const std::map<std::string, TopicSettings> single{{name, topic}};
      saga::Plans one(single, registry);
      good.emplace(name, topic);
    } catch (const ConfigError& e) {
      // Into the registry row and logs: never a password (a step may name a URL).
      options.bad_topics[name] = storage::MaskPasswords(e.what());
    }
  }
  if (options.bad_topics.empty()) return good;
  const bool all_topics = std::find(options.topics.begin(), options.topics.end(), "*") != options.topics.end();
  std::erase_if(options.topics, [&](const std::string& t) { return options.bad_topics.count(t) > 0; });
  if ((all_topics && good.empty()) || options.topics.empty()) {
    throw ConfigError(options.bad_topics.begin()->second + " (no topic this node serves has a plan that builds)");
  }
  for (const auto& [topic, reason] : options.bad_topics) {
    spdlog::error("TOPIC_PLAN_INVALID node={} topic={} err=\"{}\" action=\"serving the other topics; no event "
                  "of this one is sent here\"",
                  options.node_address, topic, reason);
  }
  return good;
}

// What the node's table_sync steps need to run relayed (docs/relay.md).
std::shared_ptr<const saga::RelayEnvironment> RelayEnvironmentFor(storage::ConnectionPool& pool, const Settings& s,
                                                                  const std::map<std::string, TopicSettings>& topics,
                                                                  const consumer::ConsumerOptions& o) {
  auto env = std::make_shared<saga::RelayEnvironment>();
  env->framework = &pool;
  env->node = o.node_address;
  env->service = s.service;
  env->options.window_bytes = s.relay.window_bytes;
  env->options.relay.poll = s.relay.poll_interval;
  env->topics = topics;
  if (s.consumer.wakeups) {
    // The waker reads the leader's address from the database at most every 5 s; it
    // and its clock live as long as the environment.
    struct Waking {
      SystemClock clock;
      dispatcher::DispatcherWaker waker;
      Waking(storage::ConnectionPool& p, const std::string& service) : waker(p, service, clock) {}
    };
    auto waking = std::make_shared<Waking>(pool, s.service);
    env->wake_dispatcher = [waking] { waking->waker.Wake(); };
  }
  return env;
}

// The node's topics and dsync's own: the source halves of relayed steps.
std::map<std::string, TopicSettings> WithRelayTopic(std::map<std::string, TopicSettings> topics) {
  topics.emplace(kRelaySourceTopic, saga::RelaySourceTopic());
  return topics;
}

// A consumer node's parts, built in dependency order.
struct NodeParts {
  saga::Plans plans;
  saga::Datasources datasources;
  saga::SagaEngine engine;
  consumer::ConsumerNode node;

  NodeParts(storage::ConnectionPool& pool, const Settings& s, const std::map<std::string, TopicSettings>& topics,
            Clock& clock, const consumer::ConsumerOptions& o)
      : plans(WithCaptureTopic(WithRelayTopic(topics), s),
              WithCaptureStep(saga::StepRegistry::WithBuiltins(topics, RelayEnvironmentFor(pool, s, topics, o)), s)),
        datasources(s.datasources),
        engine(pool, plans, datasources, clock, o.node_address),
        node(pool, engine, clock, ServingCaptureTopic(ServingRelayTopic(o), s)) {}

  // A node serving a list of topics serves the capture topic too (app/capture_command.h).
  static consumer::ConsumerOptions ServingCaptureTopic(consumer::ConsumerOptions o, const Settings& s) {
    o.topics = app::ServingCaptureTopic(std::move(o.topics), s);
    return o;
  }

  // A node serving a list of topics serves the source halves of relayed steps too.
  static consumer::ConsumerOptions ServingRelayTopic(consumer::ConsumerOptions o) {
    const bool all = o.topics.empty() || std::find(o.topics.begin(), o.topics.end(), "*") != o.topics.end();
    if (!all && std::find(o.topics.begin(), o.topics.end(), kRelaySourceTopic) == o.topics.end()) {
      o.topics.push_back(kRelaySourceTopic);
    }
    return o;
  }
};

int RunNode(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  consumer::ConsumerOptions options = NodeOptions(inv, s);
  SetupLogging(s.log_level, "node");
  const std::map<std::string, TopicSettings> topics = BuildableTopics(s, options);
  auto pool = OpenDatabase(s, NodeConnections(s.consumer.capacity));
  sigset_t signals = BlockStopSignals();
  SystemClock clock;
  NodeParts parts(*pool, s, topics, clock, options);
  parts.node.RefuseIfAddressInUse();  // a live node holds the address: exit 1, one line, nothing touched
  spdlog::info("NODE_STARTING node={} service={} capacity={} prefetch={} pool={} topics={} db={}",
               options.node_address, s.service, options.capacity, PrefetchText(options.prefetch), pool->stats().max_size,
               nlohmann::json(options.topics).dump(), pool->url().Masked());
  WarnIfNotDefaultService(*pool, s.service, "node");
  parts.node.Start();
  std::string cause = parts.node.WaitForDrainRequest(signals);
  spdlog::info("NODE_STOPPING node={} cause=\"{}\"", options.node_address, cause);
  bool clean = parts.node.Drain();
  const saga::CommitGroupStats& g = parts.engine.group_stats();
  spdlog::info("NODE_STOPPED node={} drained={} polls={} claimed={} claimed_at_commit={} batches={} "
               "batched_events={} commit_groups={} group_members={} groups_rolled_back={} wakeups_received={} "
               "wakeups_acted={} dispatcher_wakes={}",
               options.node_address, clean ? "all" : "partially (rest left for the sweeper)",
               parts.node.stats().polls.load(), parts.engine.stats().claimed.load(),
               parts.engine.stats().claimed_at_commit.load(),
               parts.node.stats().batches.load(), parts.node.stats().batched_events.load(), g.groups.load(),
               g.members.load(), g.rolled_back.load(), parts.node.wakeup_stats().received,
               parts.node.wakeup_stats().acted, parts.node.wakeup_stats().dispatcher_wakes);
  return 0;
}

// --- dispatcher ------------------------------------------------------------

// One per thread of dispatcher::DispatcherService (lease, dispatch, sweep, retention,
// batches, schedules) and one for the wake-up listener's lookups.
constexpr int kDispatcherConnections = 7;

int RunDispatcher(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(s.log_level, "dispatcher");
  auto pool = OpenDatabase(s, kDispatcherConnections);
  sigset_t signals = BlockStopSignals();
  SystemClock clock;
  dispatcher::DispatcherService service(*pool, DispatcherOptionsFrom(s), clock);
  spdlog::info("DISPATCHER_STARTING owner={} lock={} db={}", service.owner(), service.lock_name(),
               pool->url().Masked());
  WarnIfNotDefaultService(*pool, s.service, "dispatcher");
  service.Start();
  const char* stop_signal = WaitForStopSignal(signals);
  spdlog::info("DISPATCHER_STOPPING owner={} signal={}", service.owner(), stop_signal);
  service.Stop();
  return 0;
}

// --- serve / all -----------------------------------------------------------

// HTTP threads: each may hold a database connection while it serves a request.
constexpr int kApiThreads = 16;

api::HttpOptions ApiHttpOptions(const Settings& s) {
  api::HttpOptions http = HttpOptionsFrom(s);
  http.connection.threads = kApiThreads;
  return http;
}

// The HTTP API's parts: the event store, the waker that tells the dispatcher about the
// events the API produced (wake-ups), and the server, which exports `metrics`.
struct ApiParts {
  api::EventStore store;
  dispatcher::DispatcherWaker waker;
  api::HttpServer server;

  ApiParts(storage::ConnectionPool& pool, const Settings& s, Clock& clock, metrics::Registry metrics)
      : store(pool, StoreOptionsFrom(s)),
        waker(pool, s.service, clock),
        server(store, ApiHttpOptions(s), clock, std::move(metrics)) {
    if (s.dispatcher.wakeups) store.OnProduced([this] { waker.Wake(); });
  }
};

int RunServe(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(s.log_level, "api");
  auto pool = OpenDatabase(s, kApiThreads + 2);
  sigset_t signals = BlockStopSignals();
  SystemClock clock;
  ApiParts api_parts(*pool, s, clock, ComponentMetrics({.pool = pool.get()}));
  api_parts.server.Start();
  spdlog::info("API_STARTED listen={} port={} auth={} db={}", s.api.listen, api_parts.server.port(),
               s.api.token.empty() ? "none" : "bearer", pool->url().Masked());
  spdlog::info("API_STOPPING signal={}", WaitForStopSignal(signals));
  api_parts.server.Stop();
  return 0;
}

// Dispatcher, consumer node and API in one process: for small deployments and demos.
// A stop signal (or an operator's drain of this node) drains the node, then stops the
// dispatcher and the API.
int RunAll(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  consumer::ConsumerOptions options = NodeOptions(inv, s);
  SetupLogging(s.log_level, "all");
  const std::map<std::string, TopicSettings> topics = BuildableTopics(s, options);
  auto pool = OpenDatabase(s, NodeConnections(s.consumer.capacity) + kDispatcherConnections + kApiThreads +
                                  CaptureComponent::Connections(s));
  sigset_t signals = BlockStopSignals();
  SystemClock clock;
  dispatcher::DispatcherService dispatcher(*pool, DispatcherOptionsFrom(s), clock);
  CaptureComponent captures(*pool, s, clock);  // the config's captures (docs/capture.md), if any
  NodeParts parts(*pool, s, topics, clock, options);
  ApiParts api_parts(*pool, s, clock,
                     ComponentMetrics({.pool = pool.get(), .dispatcher = &dispatcher,
                                       .saga = &parts.engine.stats(), .consumer = &parts.node.stats(),
                                       .captures = &captures}));
  parts.node.RefuseIfAddressInUse();  // before anything starts: exit 1 with one line
  WarnIfNotDefaultService(*pool, s.service, "all");
  api_parts.server.Start();
  dispatcher.Start();
  parts.node.Start();
  captures.Start();
  spdlog::info("ALL_STARTED node={} listen={} port={} capacity={} prefetch={} pool={} topics={} db={}",
               options.node_address, s.api.listen, api_parts.server.port(), options.capacity, PrefetchText(options.prefetch),
               pool->stats().max_size, nlohmann::json(options.topics).dump(), pool->url().Masked());
  std::string cause = parts.node.WaitForDrainRequest(signals);
  spdlog::info("ALL_STOPPING node={} cause=\"{}\"", options.node_address, cause);
  captures.Stop();
  bool clean = parts.node.Drain();
  dispatcher.Stop();
  api_parts.server.Stop();
  spdlog::info("ALL_STOPPED node={} drained={}", options.node_address,
               clean ? "all" : "partially (rest left for the sweeper)");
  return 0;
}

// --- sweep -----------------------------------------------------------------

int RunSweep(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(s.log_level, "cli");
  auto pool = OpenDatabase(s);
  registry::OfflineSweeper sweeper(*pool, s.service, s.registry.offline_timeout, s.registry.purge_after);
  auto result = sweeper.Sweep();
  std::cout << "marked_offline=" << result.marked_offline << " purged=" << result.purged << "\n";
  return 0;
}

const OptionSpec kServiceOption{"service", true, ServiceHelp("service name")};

// The flags of a consumer node (`node`, and `all` after its --listen).
std::vector<OptionSpec> NodeFlags() {
  return {{"node-address", true, "HOST:PORT this node is known by (default hostname:pid); keep it stable"},
          {"capacity", true, "events run in parallel (default consumer.capacity, 8)"},
          {"prefetch", true, "events held beyond capacity, queued for a free worker (default consumer.prefetch; -1: automatic, 0: none)"},
          {"topics", true, "comma-separated topics to serve (default: every topic of the config)"},
          {"datasources", true, "comma-separated datasources this node may use (default: every datasource of the config); "
                                "it checks and reports those it reaches, and gets only events whose steps need no other"},
          kServiceOption};
}

std::vector<CommandSpec> WithCommands(std::vector<CommandSpec> first, const std::vector<CommandSpec>& then) {
  first.insert(first.end(), then.begin(), then.end());
  return first;
}

std::vector<OptionSpec> WithFlags(std::vector<OptionSpec> first, const std::vector<OptionSpec>& then) {
  first.insert(first.end(), then.begin(), then.end());
  return first;
}

}  // namespace

const std::vector<CommandSpec>& Commands() {
  static const std::vector<CommandSpec> kCommands = WithCommands({
      {"migrate", "create or upgrade the schema (safe to re-run, and from several processes)", "", 0, 0,
       {{"service", true, ServiceHelp("on a new database: the service whose events a plain INSERT that names none "
                                      "belongs to")}}},
      {"node",
       "run a consumer node: heartbeat, run the events assigned to it as sagas; SIGTERM/SIGINT drains",
       "",
       0,
       0,
       NodeFlags()},
      {"serve",
       "run the HTTP API (events, batches, SSE progress streams, nodes, /healthz, /metrics)",
       "",
       0,
       0,
       {{"listen", true, "HOST:PORT to listen on (default api.listen, 127.0.0.1:8080)"},
        kServiceOption}},
      {"all",
       "dispatcher + consumer node + HTTP API in one process (small deployments, demos); "
       "SIGTERM/SIGINT drains",
       "",
       0,
       0,
       WithFlags({{"listen", true, "HOST:PORT of the API (default api.listen, 127.0.0.1:8080)"}}, NodeFlags())},
      {"dispatcher",
       "run a dispatcher: lease-elected leader assigns due events to the least-loaded live nodes and "
       "runs the sweeper (several may run at once)",
       "",
       0,
       0,
       {kServiceOption}},
      {"produce",
       "enqueue one event (flags or --event JSON) or many (--file, JSON lines, in batches); "
       "idempotent by code",
       "",
       0,
       0,
       {{"topic", true, "topic of the event (must be in the config)"},
        {"code", true, "unique event code: producing the same code twice yields one event"},
        {"tenant", true, "tenant id (with --data-id: the entity; ordered topics run its events in order)"},
        {"data-id", true, "id of the entity the event is about"},
        {"payload", true, "JSON object handed to the steps (default {})"},
        {"priority", true, "smaller runs first (default: the topic's priority)"},
        {"delay-ms", true, "not dispatched before now + this"},
        {"trace-id", true, "trace id carried in logs (default: the code)"},
        {"event", true, "the whole event as JSON {code, topic, tenant_id, data_id, payload, ...}"},
        {"file", true, "JSON-lines file of events ('-' = stdin); every line is checked before any is written"},
        {"batch", true, "batch code for --file (default generated; progress: dsync events --batch CODE)"},
        {"batch-size", true, "events per transaction with --file (default 1000)"},
        {"on-complete-topic", true, "with --file: produce one completion event of this topic once every event "
                                    "of the batch is terminal (payload gets the batch's counts under \"batch\")"},
        {"on-complete-payload", true, "JSON object for the completion event (default {})"},
        {"service", true, ServiceHelp("service the events belong to")},
        kJsonOption}},
      {"events",
       "list events newest first (filters, keyset paging), a batch's progress, or one event with "
       "its step timeline: dsync events show CODE",
       "[show CODE]",
       0,
       2,
       {{"status", true, "PENDING|ASSIGNED|RUNNING|SUCCESS|FAILED|COMPENSATING|COMPENSATED"},
        {"topic", true, "only this topic"},
        {"limit", true, "rows (1-1000, default 50)"},
        {"after", true, "page cursor printed by the previous page"},
        {"batch", true, "progress of this batch by status"},
        {"attention", false, "every event that cannot make progress or needs a look, with why "
                             "(v_events_needing_attention; --limit per reason)"},
        kJsonOption}},
      {"cancel",
       "end an event that will never run (PENDING, or ASSIGNED to a dead node; not started): FAILED with last_error "
       "\"cancelled: REASON\"; events held behind it by the ordering rule then run",
       "CODE",
       1,
       1,
       {{"reason", true, "why (kept in last_error and the process log; default: no reason given)"}, kJsonOption}},
      {"retry",
       "re-drive a FAILED or COMPENSATED event: from the failed step (steps still SUCCESS are kept) "
       "or from the start",
       "CODE",
       1,
       1,
       {{"from", true, "failed-step (default) or start"}, kJsonOption}},
      {"drain",
       "ask a live node to drain: it takes no new events, finishes what it holds and exits",
       "ADDRESS",
       1,
       1,
       {{"service", true, "service name (default from config)"}, kJsonOption}},
      {"nodes",
       "list live nodes with capacity, in-flight events, load, topics, heartbeat age, reachable datasources "
       "and topics whose plan failed to build there",
       "",
       0,
       0,
       {{"all", false, "include offline and stale rows"}, {"service", true, "service name"}, kJsonOption}},
      {"sweep", "mark the service's nodes with stale heartbeats offline and purge long-dead rows, once", "", 0, 0,
       {kServiceOption}},
      VerifyCommandSpec(),
      BundleCommandSpec(),
      CaptureCommandSpecs()[0],
      CaptureCommandSpecs()[1],
      {"purge",
       "remove the service's finished events (SUCCESS, COMPENSATED, FAILED) and their steps older than a bound, in small "
       "batches, and registry rows silent longer than registry.purge_after_ms; prints the counts",
       "",
       0,
       0,
       {{"older-than", true, "DURATION since the event finished: a number and ms, s, m, h or d (e.g. 7d)"},
        {"status", true, "only these terminal statuses (comma-separated; default SUCCESS,COMPENSATED,FAILED)"},
        {"archive", false, "move the rows to distribute_event_archive / distribute_event_step_archive "
                           "(default retention.archive)"},
        {"dry-run", false, "count what would be removed; write nothing"},
        {"service", true, ServiceHelp("only this service's events and nodes")},
        kJsonOption}},
  }, ControlCommandSpecs());  // issue 37: pause, resume, topics, schedules
  return kCommands;
}

int RunCommand(const Invocation& inv) {
  if (inv.version) {
    std::cout << "dsync " << DSYNC_VERSION << " (schema " << storage::EmbeddedMigrations().back().version
              << ")\n";
    return 0;
  }
  if (inv.help) {
    for (const auto& c : Commands()) {
      if (c.name == inv.command) {
        std::cout << CommandHelp(c);
        return 0;
      }
    }
    std::cout << Usage(Commands());
    return 0;
  }
  if (inv.command == "migrate") return RunMigrate(inv);
  if (inv.command == "node") return RunNode(inv);
  if (inv.command == "nodes") return RunNodes(inv);
  if (inv.command == "dispatcher") return RunDispatcher(inv);
  if (inv.command == "serve") return RunServe(inv);
  if (inv.command == "all") return RunAll(inv);
  if (inv.command == "sweep") return RunSweep(inv);
  if (inv.command == "purge") return RunPurge(inv);
  if (inv.command == "produce") return RunProduce(inv);
  if (inv.command == "events") return RunEvents(inv);
  if (inv.command == "retry") return RunRetry(inv);
  if (inv.command == "cancel") return RunCancel(inv);
  if (inv.command == "drain") return RunDrain(inv);
  if (inv.command == "verify") return inv.Get("bundle") ? RunVerifyBundle(inv) : RunVerify(inv);
  if (inv.command == "bundle") return RunBundle(inv);
  if (inv.command == "pause") return RunPause(inv);      // issue 37
  if (inv.command == "resume") return RunResume(inv);
  if (inv.command == "topics") return RunTopics(inv);
  if (inv.command == "schedules") return RunSchedules(inv);
  if (inv.command == "capture") return RunCapture(inv);
  if (inv.command == "captures") return RunCaptures(inv);
  throw UsageError("command '" + inv.command + "' is not implemented");
}

}  // namespace dsync::app
