#include "app/commands.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "config/settings.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "consumer/consumer_node.h"
#include "dispatcher/dispatch_cycle.h"
#include "dispatcher/dispatcher_service.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "registry/heartbeat_publisher.h"
#include "registry/node_directory.h"
#include "registry/offline_sweeper.h"
#include "storage/connection_pool.h"
#include "storage/migrator.h"

namespace dsync::app {
namespace {

const OptionSpec kJson{"json", false, "machine-readable JSON output"};

// Settings from the config file, then DSYNC_* variables, then the flags.
Settings ResolveSettings(const Invocation& inv) {
  Settings s = LoadSettings(inv.Get("config").value_or(""), Environment());
  if (auto db = inv.Get("db")) s.database = *db;
  if (auto level = inv.Get("log-level")) s.log_level = *level;
  if (auto service = inv.Get("service")) {
    if (service->empty() || service->size() > 128) throw UsageError("--service must be 1 to 128 characters");
    s.service = *service;
  }
  if (auto capacity = inv.Get("capacity")) s.consumer.capacity = ParseIntOption("capacity", *capacity, 1, 10000);
  s.Validate();
  return s;
}

storage::DbUrl DatabaseUrl(const Settings& s) {
  if (s.database.empty()) {
    throw UsageError("no database: pass --db mysql://user:pass@host:port/schema, set DSYNC_DB_URL, "
                     "or set `database` in the config");
  }
  return storage::DbUrl::Parse(s.database);
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// --- migrate ---------------------------------------------------------------

int RunMigrate(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(s.log_level, "migrate");
  storage::ConnectionPool pool(DatabaseUrl(s));
  storage::Migrator migrator(pool);
  if (migrator.CreateSchemaIfMissing()) std::cout << "created schema " << pool.url().schema << "\n";
  auto result = migrator.Migrate();
  if (result.applied.empty()) {
    std::cout << "schema already at version " << result.to_version << "\n";
  } else {
    std::cout << "schema migrated from version " << result.from_version << " to " << result.to_version
              << "\n";
  }
  return 0;
}

// --- node ------------------------------------------------------------------

// Blocks SIGTERM/SIGINT in this thread (and so in every thread started after),
// to be taken synchronously by sigwait/sigtimedwait.
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Connects, and checks the schema is exactly what this binary expects. The pool holds
// at least `threads` connections (a node runs `capacity` workers plus its poller and
// heartbeat), so none of them waits for one.
std::unique_ptr<storage::ConnectionPool> OpenDatabase(const Settings& s, int threads = 0) {
  storage::DbUrl url = DatabaseUrl(s);
  storage::PoolOptions options;
  options.max_size = std::max(url.pool_size, threads);
  auto pool = std::make_unique<storage::ConnectionPool>(url, options);
  storage::Migrator(*pool).RequireCurrent();
  return pool;
}

int RunNode(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  std::string address = inv.Get("node-address").value_or(Hostname() + ":" + std::to_string(getpid()));
  CheckHostPort("node-address", address);

  std::vector<std::string> topics;
  if (auto t = inv.Get("topics")) {
    topics = SplitList(*t);
    if (topics.empty()) throw UsageError("--topics needs at least one topic name");
    for (const auto& topic : topics) {
      if (topic != "*" && !s.topics.empty() && !s.topics.count(topic)) {
        throw UsageError("--topics: unknown topic '" + topic + "' (not in the config)");
      }
    }
  } else {
    for (const auto& [name, _] : s.topics) topics.push_back(name);
  }
  if (topics.empty()) topics.push_back("*");

  // Bad step plans fail here, before the node registers.
  saga::Plans plans(s.topics, saga::StepRegistry::WithBuiltins());
  SetupLogging(s.log_level, "node");
  auto pool = OpenDatabase(s, s.consumer.capacity + 3);
  sigset_t signals = BlockStopSignals();

  SystemClock clock;
  saga::Datasources datasources(s.datasources);
  saga::SagaEngine engine(*pool, plans, datasources, clock, address);
  consumer::ConsumerOptions options;
  options.service = s.service;
  options.node_address = address;
  options.capacity = s.consumer.capacity;
  options.topics = topics;
  options.heartbeat_interval = s.registry.heartbeat_interval;
  options.poll_interval = s.consumer.poll_interval;
  options.idle_interval = std::max(s.consumer.poll_interval, s.dispatcher.idle_interval);
  options.drain_timeout = s.consumer.drain_timeout;
  consumer::ConsumerNode node(*pool, engine, clock, options);
  spdlog::info("NODE_STARTING node={} service={} capacity={} topics={} db={}", address, s.service,
               options.capacity, nlohmann::json(topics).dump(), pool->url().Masked());
  node.Start();
  std::string cause = node.WaitForDrainRequest(signals);
  spdlog::info("NODE_STOPPING node={} cause=\"{}\"", address, cause);
  bool clean = node.Drain();
  spdlog::info("NODE_STOPPED node={} drained={}", address, clean ? "all" : "partially (rest left for the sweeper)");
  return 0;
}

// --- dispatcher ------------------------------------------------------------

int RunDispatcher(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(s.log_level, "dispatcher");
  auto pool = OpenDatabase(s, 4);
  sigset_t signals = BlockStopSignals();
  SystemClock clock;
  dispatcher::DispatcherService service(*pool, s, clock);
  spdlog::info("DISPATCHER_STARTING owner={} lock={} db={}", service.owner(), service.lock_name(),
               pool->url().Masked());
  service.Start();
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("DISPATCHER_STOPPING owner={} signal={}", service.owner(), sig == SIGTERM ? "SIGTERM" : "SIGINT");
  service.Stop();
  return 0;
}

// --- nodes -----------------------------------------------------------------

int RunNodes(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(s.log_level, "cli");
  auto pool = OpenDatabase(s);
  registry::NodeDirectory directory(*pool, s.service, s.registry.offline_timeout);
  auto nodes = inv.Flag("all") ? directory.AllNodes() : directory.LiveNodes();
  std::vector<std::string> addresses;
  for (const auto& n : nodes) addresses.push_back(n.node_address);
  // From the event table (the truth), not the nodes' own processing_count.
  std::map<std::string, int64_t> in_flight = pool->Run(
      "count in-flight events", [&](storage::Connection& c) { return dispatcher::CountInFlight(c, addresses); });

  if (inv.Flag("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& n : nodes) {
      out.push_back({{"node_address", n.node_address},
                     {"status", registry::NodeStatusName(n.status)},
                     {"capacity", n.metadata.capacity},
                     {"in_flight", in_flight[n.node_address]},
                     {"load", n.metadata.load},
                     {"processing_count", n.metadata.processing_count},
                     {"topics", n.metadata.topics},
                     {"heartbeat_age_ms", n.heartbeat_age.count()},
                     {"metadata_valid", n.metadata_valid},
                     {"version", n.metadata.version},
                     {"incarnation", n.metadata.incarnation}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << std::left << std::setw(28) << "ADDRESS" << std::setw(10) << "STATUS" << std::setw(10)
            << "CAPACITY" << std::setw(11) << "IN_FLIGHT" << std::setw(7) << "LOAD" << std::setw(10)
            << "HEARTBEAT" << "TOPICS\n";
  for (const auto& n : nodes) {
    std::ostringstream load, age;
    load << std::fixed << std::setprecision(2) << n.metadata.load;
    age << std::fixed << std::setprecision(1) << n.heartbeat_age.count() / 1000.0 << "s";
    std::string topics;
    for (const auto& t : n.metadata.topics) topics += (topics.empty() ? "" : ",") + t;
    std::cout << std::left << std::setw(28) << n.node_address << std::setw(10) << registry::NodeStatusName(n.status)
              << std::setw(10) << n.metadata.capacity << std::setw(11) << in_flight[n.node_address]
              << std::setw(7) << load.str() << std::setw(10) << age.str()
              << (topics.empty() ? "*" : topics) << (n.metadata_valid ? "" : "  (invalid metadata)") << "\n";
  }
  if (nodes.empty()) std::cout << "(no " << (inv.Flag("all") ? "" : "live ") << "nodes for service " << s.service << ")\n";
  return 0;
}

// --- sweep -----------------------------------------------------------------

int RunSweep(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(s.log_level, "cli");
  auto pool = OpenDatabase(s);
  registry::OfflineSweeper sweeper(*pool, s.registry.offline_timeout, s.registry.purge_after);
  auto result = sweeper.Sweep();
  std::cout << "marked_offline=" << result.marked_offline << " purged=" << result.purged << "\n";
  return 0;
}

}  // namespace

const std::vector<CommandSpec>& Commands() {
  static const std::vector<CommandSpec> kCommands = {
      {"migrate", "create or upgrade the schema (safe to re-run, and from several processes)", "", 0, 0, {}},
      {"node",
       "run a consumer node: heartbeat, run the events assigned to it as sagas; SIGTERM/SIGINT drains",
       "",
       0,
       0,
       {{"node-address", true, "HOST:PORT this node is known by (default hostname:pid); keep it stable"},
        {"capacity", true, "events run in parallel (default consumer.capacity, 8)"},
        {"topics", true, "comma-separated topics to serve (default: every topic of the config)"},
        {"service", true, "service name (default from config, kbs-sync)"}}},
      {"dispatcher",
       "run a dispatcher: lease-elected leader assigns due events to the least-loaded live nodes and "
       "runs the sweeper (several may run at once)",
       "",
       0,
       0,
       {{"service", true, "service name (default from config, kbs-sync)"}}},
      {"nodes",
       "list live nodes with capacity, in-flight events, load, topics, heartbeat age",
       "",
       0,
       0,
       {{"all", false, "include offline and stale rows"}, {"service", true, "service name"}, kJson}},
      {"sweep", "mark nodes with stale heartbeats offline and purge long-dead rows, once", "", 0, 0, {}},
  };
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
  if (inv.command == "sweep") return RunSweep(inv);
  throw UsageError("command '" + inv.command + "' is not implemented");
}

}  // namespace dsync::app
