// dsync configuration: the JSON file of docs/configuration.md,
// then DSYNC_* environment overrides, then command-line flags (applied by the
// caller). Loaded once in main into these structs; nothing reads JSON afterwards.
//
//   Settings s = LoadSettings("config/dsync.json", Environment());
//
// Rules:
//   - Unknown keys are rejected with their JSON path ("topics.SPACE_ADD.stepz").
//   - Every duration key ends in _ms and becomes a std::chrono::milliseconds.
//   - Every key has a default except `database` (file, DSYNC_DB_URL or --db),
//     `topics` and each topic's `steps` (required when a file is given).
//   - Cross-field rules are checked by Validate() with a one-line reason, e.g.
//     registry.heartbeat_interval_ms must be at most offline_timeout_ms / 2.
//   - Environment overrides: every scalar key has a variable named DSYNC_ + its path
//     upper-cased with '.' -> '_', e.g. DSYNC_REGISTRY_HEARTBEAT_INTERVAL_MS=1000,
//     DSYNC_API_TOKEN=...; DSYNC_DB_URL overrides `database`.
//
// Thread safety: value types.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsync {

using Millis = std::chrono::milliseconds;

struct RegistrySettings {
  Millis heartbeat_interval{10000};   // registry.heartbeat_interval_ms
  Millis offline_timeout{30000};      // registry.offline_timeout_ms
  Millis sweep_interval{5000};        // registry.sweep_interval_ms: offline marking cadence
  Millis purge_after{7LL * 24 * 3600 * 1000};  // registry.purge_after_ms: delete rows silent this long
};

struct DispatcherSettings {
  Millis poll_interval{200};          // dispatcher.poll_interval_ms
  Millis idle_interval{1000};         // dispatcher.idle_interval_ms
  Millis busy_interval{10};           // dispatcher.busy_interval_ms: <= poll_interval
  Millis lease_ttl{10000};            // dispatcher.lease_ttl_ms
  int batch_size = 500;               // dispatcher.batch_size
  bool wakeups = true;                // dispatcher.wakeups: wake nodes, accept wake-ups
  std::string wakeup_listen = "127.0.0.1:0";  // dispatcher.wakeup_listen: UDP HOST:PORT (0: any port)
};

struct ConsumerSettings {
  Millis poll_interval{200};          // consumer.poll_interval_ms
  Millis drain_timeout{30000};        // consumer.drain_timeout_ms
  int capacity = 8;                   // consumer.capacity: parallel events (--capacity)
  int prefetch = -1;                  // consumer.prefetch (--prefetch): -1 = capacity, 0 = none
  bool wakeups = true;                // consumer.wakeups: listen for wake-ups, wake the dispatcher
  std::string wakeup_listen;          // consumer.wakeup_listen: UDP HOST:PORT; "": the node address
};

// Events a node may hold assigned beyond `capacity`, waiting for a free worker:
// consumer.prefetch, with -1 meaning "as many as capacity".
inline int EffectivePrefetch(const ConsumerSettings& s) {
  return s.prefetch < 0 ? s.capacity : s.prefetch;
}

struct ApiSettings {
  std::string listen = "127.0.0.1:8080";  // api.listen
  std::string token;                      // api.token: bearer token; empty = no auth
  int64_t max_body_bytes = 1048576;       // api.max_body_bytes
};

// One step of a topic's plan. `params` holds the type-specific keys (source, target,
// table, where, ...) verbatim; the step type validates them when plans are built.
struct StepSpec {
  std::string name;
  std::string type;
  int max_retry = -1;                 // -1: the topic's max_retry
  Millis timeout{0};                  // timeout_ms; 0: the topic's max_processing_time_ms
  nlohmann::json params = nlohmann::json::object();
};

struct TopicSettings {
  int max_retry = 3;
  Millis backoff_base{1000};          // backoff_base_ms
  Millis backoff_max{60000};          // backoff_max_ms
  Millis max_processing_time{300000}; // max_processing_time_ms: since last activity
  // claim_timeout_ms: longest an event may stay ASSIGNED to a live node that does not
  // claim it (it does not serve the topic, or it had room) before the sweeper hands it
  // back. A node claims within a poll (consumer.poll_interval_ms, 200) of having room,
  // and reports its room every heartbeat (10 s): the default is three heartbeats.
  Millis claim_timeout{30000};
  int batch_limit = 0;                // 0: dispatcher.batch_size
  int priority = 0;                   // default priority of new events; smaller runs first
  std::string strategy = "least_load";  // least_load|weighted|least_connections|round_robin|consistent_hash
  bool ordered = true;                // per (tenant_id, data_id) ordering
  std::vector<StepSpec> steps;
};

struct Settings {
  std::string database;               // URL; validated by storage::DbUrl::Parse at use
  std::string service = "kbs-sync";
  std::string log_level = "info";
  std::map<std::string, std::string> datasources;  // name -> URL
  RegistrySettings registry;
  DispatcherSettings dispatcher;
  ConsumerSettings consumer;
  ApiSettings api;
  std::map<std::string, TopicSettings> topics;

  // Cross-field rules. Throws ConfigError with a one-line reason.
  void Validate() const;
};

// Environment variables as name -> value (tests pass their own map).
using EnvMap = std::map<std::string, std::string>;
EnvMap Environment();

// Parses JSON text. Throws ConfigError("config: <path>: <reason>").
Settings ParseSettings(const std::string& json_text, const EnvMap& env);
// Reads and parses a file; `path` empty means defaults + environment only (then
// `topics` may be empty). Throws ConfigError (unreadable file, non-JSON, ...).
Settings LoadSettings(const std::string& path, const EnvMap& env);

// Every configurable key: path, default as text, environment variable, meaning.
// Drives `dsync config-keys` and the README's configuration table.
struct SettingKey {
  std::string path;           // e.g. "registry.heartbeat_interval_ms", "topics.<name>.max_retry"
  std::string default_value;  // JSON text; "" when there is no fixed default (see doc)
  std::string env;            // DSYNC_... or "" (per-topic keys have none)
  std::string doc;
};
const std::vector<SettingKey>& AllSettingKeys();

}  // namespace dsync
