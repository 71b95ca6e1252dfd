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

// Connects, and checks the schema is exactly what this binary expects.
std::unique_ptr<storage::ConnectionPool> OpenDatabase(const Settings& s) {
  auto pool = std::make_unique<storage::ConnectionPool>(DatabaseUrl(s));
  storage::Migrator(*pool).RequireCurrent();
  return pool;
}

std::string Hostname() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return host;
}

std::string UtcNowIso() {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
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

  SetupLogging(s.log_level, "node");
  auto pool = OpenDatabase(s);

  // Signals are taken synchronously by sigwait below: block them before any thread
  // starts, so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  registry::NodeMetadata meta;
  meta.version = DSYNC_VERSION;
  meta.capacity = s.consumer.capacity;
  meta.topics = topics;
  meta.host = Hostname();
  meta.pid = getpid();
  meta.started_at = UtcNowIso();
  meta.incarnation = meta.host + ":" + std::to_string(meta.pid) + ":" +
                     std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());

  SystemClock clock;
  registry::HeartbeatPublisher heartbeat(*pool, clock, s.service, address, s.registry.heartbeat_interval,
                                         [meta] { return meta; });
  spdlog::info("NODE_STARTING node={} service={} capacity={} topics={} db={}", address, s.service,
               meta.capacity, nlohmann::json(topics).dump(), pool->url().Masked());
  heartbeat.Start();

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("NODE_STOPPING node={} signal={}", address, sig == SIGTERM ? "SIGTERM" : "SIGINT");
  heartbeat.Stop();
  try {
    heartbeat.MarkDraining();
    // In-flight work drains here once the consumer runs events.
    heartbeat.MarkOffline();
  } catch (const DbError& e) {
    spdlog::warn("NODE_STOP_UNCLEAN node={} err={}", address, e.what());
  }
  spdlog::info("NODE_STOPPED node={}", address);
  return 0;
}

// --- nodes -----------------------------------------------------------------

// Params: service name. In-flight events per node, from the event table (the truth).
constexpr const char* kInFlightByNode = R"(
SELECT e.node_address, COUNT(*) FROM distribute_event e
WHERE e.status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING') AND e.node_address IN
  (SELECT r.node_address FROM distribute_node_registry r WHERE r.service_name = ?)
GROUP BY e.node_address)";

int RunNodes(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(s.log_level, "cli");
  auto pool = OpenDatabase(s);
  registry::NodeDirectory directory(*pool, s.service, s.registry.offline_timeout);
  auto nodes = inv.Flag("all") ? directory.AllNodes() : directory.LiveNodes();
  std::map<std::string, int64_t> in_flight;
  pool->Run("count in-flight events", [&](storage::Connection& c) {
    in_flight.clear();
    auto rs = c.Query(kInFlightByNode, s.service);
    while (rs->next()) in_flight[rs->getString(1)] = rs->getInt64(2);
  });

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
       "run a consumer node: heartbeat into the registry until SIGTERM/SIGINT, then drain",
       "",
       0,
       0,
       {{"node-address", true, "HOST:PORT this node is known by (default hostname:pid); keep it stable"},
        {"capacity", true, "events run in parallel (default consumer.capacity, 8)"},
        {"topics", true, "comma-separated topics to serve (default: every topic of the config)"},
        {"service", true, "service name (default from config, kbs-sync)"}}},
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
  if (inv.command == "sweep") return RunSweep(inv);
  throw UsageError("command '" + inv.command + "' is not implemented");
}

}  // namespace dsync::app
