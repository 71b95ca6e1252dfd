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

#include "config/schedules.h"  // issue 37: schedules
#include "config/captures.h"
#include "core/service.h"

namespace dsync {

using Millis = std::chrono::milliseconds;

// Each field: its config key, what it means, and its default (the initialiser; the
// same text is in docs/configuration.md and `dsync config-keys`).
struct RegistrySettings {
  Millis heartbeat_interval{10000};   // registry.heartbeat_interval_ms: how often a node refreshes its row; <= offline_timeout / 2. Default 10 s
  Millis offline_timeout{30000};      // registry.offline_timeout_ms: a node silent this long (database clock) is offline. Default 30 s
  Millis sweep_interval{5000};        // registry.sweep_interval_ms: offline marking cadence of the leader's sweeper. Default 5 s
  Millis purge_after{7LL * 24 * 3600 * 1000};  // registry.purge_after_ms: delete rows silent this long; > offline_timeout. Default 7 days
};

struct DispatcherSettings {
  Millis poll_interval{200};          // dispatcher.poll_interval_ms: pause while events wait; <= idle_interval. Default 200 ms
  Millis idle_interval{1000};         // dispatcher.idle_interval_ms: longest pause while nothing is due. Default 1 s
  Millis busy_interval{2};            // dispatcher.busy_interval_ms: pause after a round with work; <= poll_interval. Default 2 ms
  Millis lease_ttl{10000};            // dispatcher.lease_ttl_ms: lease lifetime (database clock), renewed every third. Default 10 s
  int batch_size = 500;               // dispatcher.batch_size: most events assigned per round, >= 1. Default 500
  bool wakeups = true;                // dispatcher.wakeups: wake nodes after assigning, accept wake-ups. Default true
  Millis batch_check_interval{1000};  // dispatcher.batch_check_interval_ms: how often the leader checks open batches for completion. Default 1 s
  std::string wakeup_listen = "127.0.0.1:0";  // dispatcher.wakeup_listen: UDP HOST:PORT for wake-ups (0: any port). Default 127.0.0.1:0
};

// Retention (docs/event-lifecycle.md "Retention"): the dispatcher leader removes
// finished events and their steps, in batches, once they are this old.
struct RetentionSettings {
  bool enabled = true;                              // retention.enabled: false keeps everything
  Millis finished_after{7LL * 24 * 3600 * 1000};    // retention.finished_after_ms: SUCCESS, COMPENSATED
  Millis failed_after{30LL * 24 * 3600 * 1000};     // retention.failed_after_ms: FAILED
  Millis verify_results_after{7LL * 24 * 3600 * 1000};  // retention.verify_results_after_ms: dsync_verify_result rows
  bool archive = false;                             // retention.archive: move to *_archive, not delete
  int batch_size = 500;                             // retention.batch_size: events per transaction
  Millis interval{60000};                           // retention.interval_ms: between passes
  Millis batch_pause{20};                           // retention.batch_pause_ms: between batches of a pass
  Millis busy_pause{2000};                          // retention.busy_pause_ms: between batches while the dispatcher assigns
};

struct RelaySettings {
  int64_t window_bytes = 64LL << 20;  // relay.window_bytes: relayed bytes in flight per step (docs/relay.md). Default 64 MiB
  Millis poll_interval{20};           // relay.poll_interval_ms: a relay half's wait when the other is behind. Default 20 ms
  Millis verify_wait{60000};          // relay.verify_wait_ms: a verify across the gap's wait for its source half to start. Default 60 s
};

struct BundleSettings {
  std::string key;                    // bundle.key: the HMAC-SHA256 key signing and checking bundle files (docs/relay.md "Bundles"). Default "": bundles refused
};

struct ConsumerSettings {
  Millis poll_interval{200};          // consumer.poll_interval_ms: how often a node looks for its events. Default 200 ms
  Millis drain_timeout{30000};        // consumer.drain_timeout_ms: on shutdown, how long running events may take. Default 30 s
  int capacity = 8;                   // consumer.capacity (--capacity): parallel events, 1..10000. Default 8
  int prefetch = -1;                  // consumer.prefetch (--prefetch): held beyond capacity; -1 = automatic (consumer::AutoPrefetch), 0 = none. Default -1
  bool wakeups = true;                // consumer.wakeups: listen for wake-ups, wake the dispatcher. Default true
  std::string wakeup_listen;          // consumer.wakeup_listen: UDP HOST:PORT for wake-ups. Default "": the node address
};

struct ApiSettings {
  std::string listen = "127.0.0.1:8080";  // api.listen (--listen): HOST:PORT of the HTTP API. Default 127.0.0.1:8080
  std::string token;                      // api.token: bearer token the API requires. Default "": no auth
  int64_t max_body_bytes = 1048576;       // api.max_body_bytes: largest request body, 1..64 MiB. Default 1 MiB
  std::vector<std::string> allowed_hosts; // api.allowed_hosts: Host names answered ("*": any). Default []: loopback names and the listen host without a token, any with one
};

// One step of a topic's plan. `params` holds the type-specific keys (source, target,
// table, where, ...) verbatim; the step type validates them when plans are built.
struct StepSpec {
  std::string name;                   // steps[].name: required, unique within the topic, <= 50 characters
  std::string type;                   // steps[].type: required; table_sync, table_delete, demo or a registered type
  int max_retry = -1;                 // steps[].max_retry: retries of this step. Default -1: the topic's max_retry
  Millis timeout{0};                  // steps[].timeout_ms: deadline of one attempt. Default 0: the topic's step_timeout_ms
  nlohmann::json params = nlohmann::json::object();  // every other key of the step, verbatim. Default {}
};

struct TopicSettings {
  int max_retry = 3;                  // max_retry: retries of a failing step after its first attempt (N + 1 attempts) before compensation, >= 0. Default 3
  int max_resets = 5;                 // max_resets: resets not charged to max_retry (node died, connection lost) an event may take; one more and it ends FAILED, >= 0. Default 5
  Millis backoff_base{1000};          // backoff_base_ms: delay before the first retry. Default 1 s
  Millis backoff_max{60000};          // backoff_max_ms: longest delay between retries. Default 60 s
  // max_processing_time_ms: longest without activity before the event is stuck: the
  // sweeper resets a RUNNING/COMPENSATING event idle for longer than this plus a grace
  // of a tenth of it, at least 2 s (dispatcher::SweeperIdleBound), so a step attempt
  // whose deadline is this bound (step_timeout_ms's default) fails by its own deadline,
  // charged to the step, before the sweeper would reset it. Default 5 min (+ 30 s grace)
  Millis max_processing_time{300000};
  // step_timeout_ms: deadline of one step attempt (forward or compensation) on its node,
  // for steps without their own timeout_ms; at least 100. Default 0: max_processing_time_ms
  Millis step_timeout{0};
  Millis claim_timeout{30000};       // claim_timeout_ms: longest ASSIGNED to a live node that does not claim it (does not serve the topic, or reports room) before the sweeper hands it back. Default 30 s (three heartbeats)
  int batch_limit = 0;                // batch_limit: most events of the topic per round. Default 0: dispatcher.batch_size
  int priority = 0;                   // priority: of new events; smaller runs first. Default 0
  std::string strategy = "least_load";  // strategy: least_load|weighted|least_connections|round_robin|consistent_hash. Default least_load
  bool ordered = true;                // ordered: one event per (tenant_id, data_id) at a time, in creation order. Default true
  // ---- issue 37: per-key concurrency limit (docs/fairness-and-limits.md) ----
  std::string concurrency_key;        // concurrency_key: tenant_id, data_id or payload.<field>[.<field>...]. Default "": none
  int concurrency_limit = 0;          // concurrency_limit: most in-flight events of the topic per key value, >= 1 with a key. Default 0: none
  // ---- end of issue 37 ----
  std::vector<StepSpec> steps;        // steps: required, non-empty; run in order, compensated in reverse

  // The deadline of one attempt of a step without its own timeout_ms.
  Millis StepTimeout() const { return step_timeout.count() > 0 ? step_timeout : max_processing_time; }
};

// ---- issue 37: fair dispatch across tenants (docs/fairness-and-limits.md) ----
struct FairnessSettings {
  bool enabled = true;                     // fairness.enabled: share each priority's assignments across tenants. Default true
  std::map<std::string, int> weights;      // fairness.weights: tenant_id -> weight 1..1000. Default {}: every tenant 1
};
// ---- end of issue 37 ----

struct Settings {
  std::string database;               // database (--db, DSYNC_DB_URL): framework database URL; validated by storage::DbUrl::Parse at use. Required
  std::string service = kDefaultService;   // service (--service): nodes of one service share events. Default kbs-sync
  std::string log_level = "info";     // log_level (--log-level): trace|debug|info|warn|error|off. Default info
  std::map<std::string, std::string> datasources;  // datasources: name -> database URL, named by steps. Default {}
  RegistrySettings registry;          // registry.*
  DispatcherSettings dispatcher;      // dispatcher.*
  ConsumerSettings consumer;          // consumer.*
  ApiSettings api;                    // api.*
  RetentionSettings retention;        // retention.*
  RelaySettings relay;                // relay.*
  BundleSettings bundle;              // bundle.*
  // ---- issue 37 ----
  FairnessSettings fairness;          // fairness.*
  // datasources.<name>.max_concurrent_steps: in-flight events of topics naming the
  // datasource, cluster-wide (a datasource given as {"url": ..., "max_concurrent_steps": N}).
  // Default: none
  std::map<std::string, int> datasource_limits;
  // ---- end of issue 37 ----
  std::map<std::string, TopicSettings> topics;  // topics: name -> topic. Required when a file is given
  // --- issue 37: schedules (config/schedules.h) ---
  std::map<std::string, ScheduleSettings> schedules;  // schedules: name -> cron schedule. Default {}
  // --- end issue 37 ---
  std::map<std::string, CaptureSettings> captures;  // captures: name -> binlog capture (config/captures.h). Default {}

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
