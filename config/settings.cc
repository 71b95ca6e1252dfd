// Loads dsync's configuration (config/settings.h): JSON file, then DSYNC_* environment
// overrides. One constant table, kKeys, describes every key (path, where the value
// lives in Settings, limits, meaning); the field gives the key's type and default (its
// initialiser in config/settings.h), the path its environment variable. JSON parsing,
// environment overrides, Validate()'s re-checks and AllSettingKeys() are all driven by
// it, so they cannot drift apart. Structured keys (datasources, topics, steps) are in
// the table too, for documentation, and are walked by hand below.
//
// Every error is a ConfigError whose message is one line starting with "config: " and
// naming the JSON path or environment variable. Values of string keys are never echoed
// (database and datasource URLs carry passwords, api.token is a secret).
//
// Thread safety: stateless functions over immutable data.
#include "config/settings.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string_view>
#include <type_traits>
#include <variant>

#include "core/error.h"
#include "core/wakeup.h"

extern char** environ;  // POSIX: the process environment

namespace dsync {
namespace {

using json = nlohmann::json;

// Which object a key lives in: the top level (or one of its sections), a topic, a step.
enum class Scope { kSettings, kTopic, kStep };

enum class Kind {
  kString,       // min/max bound the length; `choices` ("a|b|c") restricts the values
  kInteger,      // an int or int64_t field; min/max bound the value
  kMillis,       // a *_ms key: integer milliseconds in [max(1, min), max_ms]
  kStringList,   // an array of strings (environment: comma-separated); min/max bound each length
  kBool,
  kDatasources,  // structured keys: no field, no environment variable
  kTopics,
  kSteps,
  kSchedules,    // issue 37: config/schedules.h
  kCaptures,     // config/captures.h
  kWeights,      // issue 37: fairness.weights, tenant -> integer weight
};

// The objects a field accessor may reach into; only the one matching the key's scope is set.
struct Target {
  Settings* settings = nullptr;
  TopicSettings* topic = nullptr;
  StepSpec* step = nullptr;
};

using FieldRef = std::variant<std::string*, int*, int64_t*, Millis*, bool*, std::vector<std::string>*>;

// Where a key's value lives: its scope, its kind and, for a scalar key, the accessor of
// its field (null for structured kinds). Scalar keys get it from Field<...>() below.
struct FieldAccess {
  Scope scope;
  Kind kind;
  FieldRef (*get)(const Target&) = nullptr;
};

// The object of a Target that members of `Class` are reached from, and its scope.
template <class Class>
struct Root;
template <>
struct Root<Settings> {
  static constexpr Scope kScope = Scope::kSettings;
  static Settings* Of(const Target& t) { return t.settings; }
};
template <>
struct Root<TopicSettings> {
  static constexpr Scope kScope = Scope::kTopic;
  static TopicSettings* Of(const Target& t) { return t.topic; }
};
template <>
struct Root<StepSpec> {
  static constexpr Scope kScope = Scope::kStep;
  static StepSpec* Of(const Target& t) { return t.step; }
};

template <class MemberPointer>
struct MemberOf;
template <class Class, class Type>
struct MemberOf<Type Class::*> {
  using Of = Class;
};

template <class T>
constexpr Kind KindOf() {
  if constexpr (std::is_same_v<T, std::string>) return Kind::kString;
  else if constexpr (std::is_same_v<T, Millis>) return Kind::kMillis;
  else if constexpr (std::is_same_v<T, bool>) return Kind::kBool;
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return Kind::kStringList;
  else {
    static_assert(std::is_same_v<T, int> || std::is_same_v<T, int64_t>, "a field type FieldRef holds");
    return Kind::kInteger;
  }
}

// A scalar key's field: the members leading to it from Settings (through a section),
// TopicSettings or StepSpec, e.g. Field<&Settings::registry, &RegistrySettings::purge_after>().
// The scope follows from the first member's class, the kind from the field's type.
template <auto kFirst, auto... kRest>
constexpr FieldAccess Field() {
  using R = Root<typename MemberOf<decltype(kFirst)>::Of>;
  using Value = std::remove_reference_t<decltype(((R::Of(Target{})->*kFirst) .* ... .* kRest))>;
  return {R::kScope, KindOf<Value>(),
          [](const Target& t) -> FieldRef { return &((R::Of(t)->*kFirst) .* ... .* kRest); }};
}

constexpr int64_t kMinInt = std::numeric_limits<int>::min();
constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
// Ten years. Far above any sensible duration and far from overflowing when a duration
// is converted to nanoseconds for a sleep or a deadline.
constexpr int64_t kMaxMillis = 10LL * 365 * 24 * 3600 * 1000;

// A scalar key's default is its field's initialiser (config/settings.h) and its
// environment variable DSYNC_ + its path (EnvName); the table states only the
// exceptions.
struct KeyDescriptor {
  std::string_view path;  // "registry.heartbeat_interval_ms", "topics.<name>.max_retry", ...
  FieldAccess field;
  int64_t min = 0;          // kInteger: smallest value; kString: shortest length
  int64_t max = kMaxInt;    // kInteger: largest value; kString: longest length
  int64_t max_ms = kMaxMillis;  // kMillis: largest value (min: the smallest, at least 1)
  std::string_view choices = {};
  bool required = false;    // must be present in its object (when a file is given)
  bool no_default = false;  // the initialiser is no fixed default (see doc); implied by `required`
  std::string_view default_text = {};  // structured keys: their default as JSON text, if any
  std::string_view env = {};           // the environment variable, where it is not EnvName's rule
  std::string_view doc = {};
};

constexpr std::string_view kStrategies =
    "least_load|weighted|least_connections|round_robin|consistent_hash";
constexpr std::string_view kLogLevels = "trace|debug|info|warn|error|off";

constexpr KeyDescriptor kKeys[] = {
    // Top level.
    {.path = "database",
     .field = Field<&Settings::database>(),
     .no_default = true, .env = "DSYNC_DB_URL",
     .doc = "Framework database URL mysql://user:pass@host:port/schema (holds distribute_*). "
            "Required: from the file, DSYNC_DB_URL or --db."},
    {.path = "service",
     .field = Field<&Settings::service>(),
     .min = 1, .max = 128,
     .doc = "Service this process belongs to: its dispatchers and nodes handle only events whose "
            "`service` column names it, and judge only its nodes; `dsync produce` and the API write it. "
            "1-128 characters."},
    {.path = "log_level",
     .field = Field<&Settings::log_level>(),
     .choices = kLogLevels,
     .doc = "Log level: trace, debug, info, warn, error or off (--log-level)."},
    {.path = "datasources", .field = {.scope = Scope::kSettings, .kind = Kind::kDatasources},
     .default_text = "{}",
     .doc = "Object of datasource name -> database URL, referenced by steps' source/target."},
    {.path = "captures", .field = {.scope = Scope::kSettings, .kind = Kind::kCaptures},
     .default_text = "{}",
     .doc = "Object of capture name -> {source, target, tables, where}: tables kept in sync from the "
            "source's binlog by `dsync capture` (docs/capture.md)."},
    // ---- issue 37: fairness and datasource limits (docs/fairness-and-limits.md) ----
    {.path = "datasources.<name>.max_concurrent_steps", .field = {.scope = Scope::kSettings, .kind = Kind::kDatasources},
     .doc = "A datasource given as {\"url\": URL, \"max_concurrent_steps\": N}: at most N events of topics whose "
            "plan names it (table_sync/table_verify source or target, table_delete target) in flight at once "
            "(ASSIGNED, RUNNING or COMPENSATING), cluster-wide, enforced by the dispatcher. 1 to 100000; "
            "default: no limit."},
    {.path = "fairness.enabled",
     .field = Field<&Settings::fairness, &FairnessSettings::enabled>(),
     .doc = "Share each priority's assignments across the tenants with due events (deficit round robin "
            "by fairness.weights); false: oldest first within a priority, whatever the tenant."},
    {.path = "fairness.weights", .field = {.scope = Scope::kSettings, .kind = Kind::kWeights},
     .default_text = "{}",
     .doc = "Object of tenant_id -> integer weight from 1 to 1000: a tenant's share of a priority's "
            "assignments while others wait is its weight over theirs. Tenants not named weigh 1."},
    // ---- end of issue 37 ----
    {.path = "topics", .field = {.scope = Scope::kSettings, .kind = Kind::kTopics}, .required = true,
     .doc = "Required: object of topic name -> topic settings. Names: 1-50 characters of "
            "A-Z a-z 0-9 _ . -"},
    // --- issue 37: schedules ---
    {.path = "schedules", .field = {.scope = Scope::kSettings, .kind = Kind::kSchedules},
     .default_text = "{}",
     .doc = "Object of schedule name -> {cron, timezone, topic, payload, missed, grace_ms, tenant_id}: the "
            "dispatcher leader produces one event of `topic` per cron tick, exactly once "
            "(docs/pause-and-schedules.md). cron: 5 fields, or 6 with a leading seconds field, UTC; "
            "timezone: UTC only; missed: skip (default) "
            "or run_once; grace_ms: how late a tick may be seen and still fire under skip (default 60000); "
            "tenant_id: the events' tenant (default \"0\")."},
    // --- end issue 37 ---

    // registry
    {.path = "registry.heartbeat_interval_ms",
     .field = Field<&Settings::registry, &RegistrySettings::heartbeat_interval>(),
     .min = 100,
     .doc = "How often a node refreshes its registry row; at most offline_timeout_ms / 2. At least 100."},
    {.path = "registry.offline_timeout_ms",
     .field = Field<&Settings::registry, &RegistrySettings::offline_timeout>(),
     .min = 1000,
     .doc = "A node silent this long (database clock) is marked offline; also how long the server lets any dsync session sit idle inside a transaction (MariaDB idle_transaction_timeout). At least 1000."},
    {.path = "registry.sweep_interval_ms",
     .field = Field<&Settings::registry, &RegistrySettings::sweep_interval>(),
     .min = 100,
     .doc = "How often the offline sweeper marks silent nodes offline. At least 100."},
    {.path = "registry.purge_after_ms",
     .field = Field<&Settings::registry, &RegistrySettings::purge_after>(),
     .doc = "Registry rows silent this long are deleted; more than offline_timeout_ms."},

    // dispatcher
    {.path = "dispatcher.poll_interval_ms",
     .field = Field<&Settings::dispatcher, &DispatcherSettings::poll_interval>(),
     .min = 10,
     .doc = "Dispatcher polling interval while events are waiting; at most idle_interval_ms. At least 10."},
    {.path = "dispatcher.idle_interval_ms",
     .field = Field<&Settings::dispatcher, &DispatcherSettings::idle_interval>(),
     .min = 10,
     .doc = "Dispatcher polling interval when nothing is waiting. At least 10."},
    {.path = "dispatcher.busy_interval_ms",
     .field = Field<&Settings::dispatcher, &DispatcherSettings::busy_interval>(),
     .doc = "Dispatcher pause after a round that assigned events or found every node full "
            "with events due (work exists), and after the first 10 rounds that find nothing "
            "due once events flowed; at most poll_interval_ms."},
    {.path = "dispatcher.lease_ttl_ms",
     .field = Field<&Settings::dispatcher, &DispatcherSettings::lease_ttl>(),
     .min = 1000, .max_ms = 600000,
     .doc = "Lifetime of the dispatcher lease (database clock); the holder renews it every third, and writes only while a quarter is left. "
            "From 1000 to 600000 (a shorter lease renews in a busy loop; a longer one leaves the cluster without a dispatcher that long after its leader dies)."},
    {.path = "dispatcher.batch_size",
     .field = Field<&Settings::dispatcher, &DispatcherSettings::batch_size>(),
     .min = 1, .max = 10000,
     .doc = "Most events assigned per dispatch round (one transaction). From 1 to 10000."},
    {.path = "dispatcher.wakeups",
     .field = Field<&Settings::dispatcher, &DispatcherSettings::wakeups>(),
     .doc = "Send a wake-up datagram (UDP) to each node right after assigning it events, and "
            "accept wake-ups from producers and nodes (the address is published in the lease "
            "row). false: polling only."},
    {.path = "dispatcher.batch_check_interval_ms",
     .field = Field<&Settings::dispatcher, &DispatcherSettings::batch_check_interval>(),
     .min = 100,
     .doc = "How often the leader checks open batches that name a completion event "
            "(distribute_batch): one GROUP BY per open batch. At least 100."},

    {.path = "dispatcher.wakeup_listen",
     .field = Field<&Settings::dispatcher, &DispatcherSettings::wakeup_listen>(),
     .min = 1,
     .doc = "UDP HOST:PORT the dispatcher receives wake-ups on; port 0 picks a free one. "
            "Loopback by default: only producers and nodes on this machine can wake it."},

    // relay
    {.path = "relay.window_bytes",
     .field = Field<&Settings::relay, &RelaySettings::window_bytes>(),
     .min = 1 << 20, .max = 16LL << 30,
     .doc = "A table_sync step relayed through the framework database (no node reaches both its "
            "source and its target; docs/relay.md) holds at most this many bytes of rows there at "
            "once: the source half waits while it is full. 1 MiB to 16 GiB."},
    {.path = "relay.poll_interval_ms",
     .field = Field<&Settings::relay, &RelaySettings::poll_interval>(),
     .min = 1, .max_ms = 10000,
     .doc = "How long a relay half waits before it looks again when the other half is behind."},
    {.path = "relay.verify_wait_ms",
     .field = Field<&Settings::relay, &RelaySettings::verify_wait>(),
     .min = 100, .max_ms = 3600000,
     .doc = "`dsync verify` across the gap (the config names a table's target but not its source): "
            "how long it waits for a node reaching the source to take the source side's half before "
            "it fails with one line saying so."},

    // bundles
    {.path = "bundle.key",
     .field = Field<&Settings::bundle, &BundleSettings::key>(),
     .doc = "The secret that signs bundle files (`dsync bundle export`) and checks them (`dsync bundle "
            "import`, `dsync verify --bundle`) with HMAC-SHA256; both sides need the same. Empty: "
            "bundle commands refuse to run. Environment: DSYNC_BUNDLE_KEY."},

    // retention
    {.path = "retention.enabled",
     .field = Field<&Settings::retention, &RetentionSettings::enabled>(),
     .doc = "The dispatcher leader removes finished events (and their steps) older than the "
            "bounds below. false: keep everything (dsync purge still works on demand)."},
    {.path = "retention.finished_after_ms",
     .field = Field<&Settings::retention, &RetentionSettings::finished_after>(),
     .doc = "SUCCESS and COMPENSATED events are kept this long after they finished (7 days)."},
    {.path = "retention.failed_after_ms",
     .field = Field<&Settings::retention, &RetentionSettings::failed_after>(),
     .doc = "FAILED events are kept this long after they failed (30 days)."},
    {.path = "retention.verify_results_after_ms",
     .field = Field<&Settings::retention, &RetentionSettings::verify_results_after>(),
     .doc = "Verify results (dsync_verify_result: one row per table of each dsync verify and POST "
            "/v1/verify) are kept this long (7 days), then deleted by the same passes; the latest "
            "result per table older than that goes too."},
    {.path = "retention.archive",
     .field = Field<&Settings::retention, &RetentionSettings::archive>(),
     .doc = "true: move removed rows to distribute_event_archive / distribute_event_step_archive "
            "(same columns; view v_events_all) instead of deleting them."},
    {.path = "retention.batch_size",
     .field = Field<&Settings::retention, &RetentionSettings::batch_size>(),
     .min = 1, .max = 10000,
     .doc = "Events removed per transaction (their steps with them): bounds each statement's "
            "rows and locks. 1 to 10000."},
    {.path = "retention.interval_ms",
     .field = Field<&Settings::retention, &RetentionSettings::interval>(),
     .min = 100,
     .doc = "Pause between two retention passes of the leader. At least 100."},
    {.path = "retention.batch_pause_ms",
     .field = Field<&Settings::retention, &RetentionSettings::batch_pause>(),
     .doc = "Least pause between two batches of a pass; the pause is also at least 3 times what the last batch took, so a pass keeps the database busy at most a quarter of the time and backs off when it is slow."},
    {.path = "retention.busy_pause_ms",
     .field = Field<&Settings::retention, &RetentionSettings::busy_pause>(),
     .doc = "Least pause between two batches of a pass while the dispatcher is assigning events: "
            "a queue that is never idle is purged at most batch_size / busy_pause events per "
            "second (500 / 2 s = 250/s by default). Lower it (or raise batch_size) when more "
            "events finish per second than that, so retention keeps up."},

    // consumer
    {.path = "consumer.poll_interval_ms",
     .field = Field<&Settings::consumer, &ConsumerSettings::poll_interval>(),
     .min = 10,
     .doc = "How often a node looks for events assigned to it. At least 10."},
    {.path = "consumer.drain_timeout_ms",
     .field = Field<&Settings::consumer, &ConsumerSettings::drain_timeout>(),
     .doc = "On shutdown, how long running events may take to finish."},
    {.path = "consumer.capacity",
     .field = Field<&Settings::consumer, &ConsumerSettings::capacity>(),
     .min = 1, .max = 10000,
     .doc = "Events a node runs in parallel (--capacity), one worker thread each. From 1 to 10000."},
    {.path = "consumer.prefetch",
     .field = Field<&Settings::consumer, &ConsumerSettings::prefetch>(),
     .min = -1, .max = 10000,
     .doc = "Events a node may hold assigned beyond capacity, waiting for a free worker "
            "(--prefetch); -1: automatic (as many as capacity; for fast steps up to 3 x capacity, "
            "at most 256), 0: none. From -1 to 10000."},
    {.path = "consumer.wakeups",
     .field = Field<&Settings::consumer, &ConsumerSettings::wakeups>(),
     .doc = "Listen for the dispatcher's wake-ups (UDP, on the node address) and poll at once "
            "when woken; wake the dispatcher when slots free up. false: polling only."},
    {.path = "consumer.wakeup_listen",
     .field = Field<&Settings::consumer, &ConsumerSettings::wakeup_listen>(),
     .doc = "UDP HOST:PORT a node receives wake-ups on; empty: its node address "
            "(--node-address), which is where the dispatcher sends them."},

    // api
    {.path = "api.listen",
     .field = Field<&Settings::api, &ApiSettings::listen>(),
     .min = 1,
     .doc = "HOST:PORT the HTTP API listens on (port 1-65535)."},
    {.path = "api.token",
     .field = Field<&Settings::api, &ApiSettings::token>(),
     .doc = "Bearer token the API requires; empty: no authentication."},
    {.path = "api.max_body_bytes",
     .field = Field<&Settings::api, &ApiSettings::max_body_bytes>(),
     .min = 1, .max = 64LL << 20,
     .doc = "Largest request body the API accepts (held in memory while read). From 1 to 67108864 (64 MiB)."},
    {.path = "api.allowed_hosts",
     .field = Field<&Settings::api, &ApiSettings::allowed_hosts>(),
     .min = 1, .max = 255,
     .doc = "Host header names the API answers (a port after the name is ignored; \"*\": any), against "
            "DNS rebinding; others get 421. Empty: with no api.token, loopback names (localhost, "
            "127.0.0.1, [::1]) and api.listen's host; with a token, any. Environment: comma-separated."},

    // topics.<name>
    {.path = "topics.<name>.max_retry",
     .field = Field<&TopicSettings::max_retry>(),
     .doc = "Retries of a failing step after its first attempt (max_retry + 1 attempts) before the event is compensated. At least 0."},
    {.path = "topics.<name>.max_resets",
     .field = Field<&TopicSettings::max_resets>(),
     .doc = "Resets that are not a step's fault (its node died or froze, the database connection was lost) an event may take without using max_retry; the claim after one more ends it FAILED. At least 0."},
    {.path = "topics.<name>.backoff_base_ms",
     .field = Field<&TopicSettings::backoff_base>(),
     .doc = "Delay before the first retry; later retries back off up to backoff_max_ms."},
    {.path = "topics.<name>.backoff_max_ms",
     .field = Field<&TopicSettings::backoff_max>(),
     .doc = "Longest delay between retries."},
    {.path = "topics.<name>.max_processing_time_ms",
     .field = Field<&TopicSettings::max_processing_time>(),
     .min = 100,
     .doc = "Longest an event may go without activity before it is treated as stuck: the sweeper resets it "
            "once idle this long plus a grace of a tenth of it (at least 2 s), so a step attempt that overruns "
            "its deadline (step_timeout_ms, by default this value) fails by its own deadline first. At least 100."},
    {.path = "topics.<name>.step_timeout_ms",
     .field = Field<&TopicSettings::step_timeout>(),
     .min = 100, .no_default = true,
     .doc = "Deadline of one attempt of a step (forward or compensation) without its own timeout_ms; "
            "default: max_processing_time_ms. At least 100."},
    {.path = "topics.<name>.claim_timeout_ms",
     .field = Field<&TopicSettings::claim_timeout>(),
     .min = 100,
     .doc = "Longest an event may stay assigned to a live node that does not claim it (the node does not "
            "serve the topic, or reports room to run it) before the sweeper hands it back. At least 100."},
    {.path = "topics.<name>.batch_limit",
     .field = Field<&TopicSettings::batch_limit>(),
     .max = 10000,
     .doc = "Most events of this topic per dispatch round; 0: dispatcher.batch_size. From 0 to 10000."},
    {.path = "topics.<name>.priority",
     .field = Field<&TopicSettings::priority>(),
     .min = kMinInt,
     .doc = "Default priority of new events of this topic; smaller runs first. Any integer."},
    {.path = "topics.<name>.strategy",
     .field = Field<&TopicSettings::strategy>(),
     .choices = kStrategies,
     .doc = "How events are spread over nodes: least_load, weighted, least_connections, "
            "round_robin or consistent_hash."},
    {.path = "topics.<name>.ordered",
     .field = Field<&TopicSettings::ordered>(),
     .doc = "Run events of one (tenant_id, data_id) one at a time, in order of creation."},
    // ---- issue 37: per-key concurrency limit (docs/fairness-and-limits.md) ----
    {.path = "topics.<name>.concurrency_key",
     .field = Field<&TopicSettings::concurrency_key>(),
     .max = 100,
     .doc = "What the topic's concurrency_limit counts per value of: tenant_id, data_id or payload.<field> "
            "(fields of A-Z a-z 0-9 _, dotted for nested objects). Default \"\": none."},
    {.path = "topics.<name>.concurrency_limit",
     .field = Field<&TopicSettings::concurrency_limit>(),
     .max = 100000,
     .doc = "Most events of this topic in flight (ASSIGNED, RUNNING, COMPENSATING) at once per value of "
            "concurrency_key, cluster-wide, enforced by the dispatcher; events whose key is missing are not "
            "limited. 0: no limit. From 0 to 100000; set together with concurrency_key."},
    // ---- end of issue 37 ----
    {.path = "topics.<name>.steps", .field = {.scope = Scope::kTopic, .kind = Kind::kSteps}, .required = true,
     .doc = "Required: non-empty array of steps, run in order, compensated in reverse."},

    // topics.<name>.steps[]: any other key of a step goes to StepSpec::params.
    {.path = "topics.<name>.steps[].name",
     .field = Field<&StepSpec::name>(),
     .min = 1, .max = 50, .required = true,
     .doc = "Required: step name, unique within the topic (at most 50 characters)."},
    {.path = "topics.<name>.steps[].type",
     .field = Field<&StepSpec::type>(),
     .min = 1, .max = 50, .required = true,
     .doc = "Required: step type (table_sync, table_delete, table_verify, table_repair, demo or a registered custom type); "
            "the type validates the step's other keys."},
    {.path = "topics.<name>.steps[].max_retry",
     .field = Field<&StepSpec::max_retry>(), .no_default = true,
     .doc = "Retries of this step; default: the topic's max_retry. At least 0."},
    {.path = "topics.<name>.steps[].timeout_ms",
     .field = Field<&StepSpec::timeout>(), .no_default = true,
     .doc = "Deadline of one attempt of this step; default: the topic's step_timeout_ms."},
};

// ---- messages -------------------------------------------------------------------

// Text from the input (a key, a file name, a bad value) made safe for a one-line
// message: control characters escaped, long text cut.
std::string Printable(std::string_view text, size_t max_chars = 64) {
  std::string out;
  for (char c : text.substr(0, max_chars)) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  if (text.size() > max_chars) out += "...";
  return out;
}

[[noreturn]] void Fail(std::string_view where, std::string_view reason) {
  std::string message = "config: ";
  message += where;
  message += ": ";
  message += reason;
  throw ConfigError(Printable(message, message.size()));  // one line, whatever came in
}

std::string Describe(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_float: return "a non-integer number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

void ExpectObject(const json& value, std::string_view where) {
  if (!value.is_object()) Fail(where, "expected an object, got " + Describe(value));
}

// nlohmann's message without its "[json.exception...]" tag and without the "last read"
// token, which echoes input text (an unterminated string may hold a password).
std::string ParserMessage(const json::parse_error& error) {
  std::string message = error.what();
  if (message.starts_with("[json.exception.")) {
    if (auto end = message.find("] "); end != std::string::npos) message.erase(0, end + 2);
  }
  if (auto start = message.find("; last read: '"); start != std::string::npos) {
    auto expected = message.rfind("'; expected ");
    if (expected != std::string::npos && expected > start) {
      message.erase(start, expected + 1 - start);
    } else {
      message.erase(start);
    }
  }
  return message;
}

// ---- the table --------------------------------------------------------------------

std::string_view Leaf(std::string_view path) { return path.substr(path.rfind('.') + 1); }

// For top-level keys: "" or the section ("registry") the key sits in.
std::string_view Section(std::string_view path) {
  auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

bool IsStructured(const KeyDescriptor& key) { return key.field.get == nullptr; }

// `section` only matters for Scope::kSettings.
const KeyDescriptor* FindKey(Scope scope, std::string_view section, std::string_view name) {
  for (const auto& key : kKeys) {
    if (key.field.scope != scope || Leaf(key.path) != name) continue;
    if (scope == Scope::kSettings && Section(key.path) != section) continue;
    return &key;
  }
  return nullptr;
}

bool IsSectionName(std::string_view name) {
  for (const auto& key : kKeys) {
    if (key.field.scope == Scope::kSettings && !name.empty() && Section(key.path) == name) return true;
  }
  return false;
}

bool IsChoice(std::string_view choices, std::string_view value) {
  while (!choices.empty()) {
    auto bar = choices.find('|');
    if (choices.substr(0, bar) == value) return true;
    if (bar == std::string_view::npos) break;
    choices.remove_prefix(bar + 1);
  }
  return false;
}

// Checks `value` against the key's type and limits and stores it in the key's field.
// `where` (a JSON path or an environment variable) names the key in messages. String
// values are never echoed except for keys with fixed choices.
void Assign(const KeyDescriptor& key, const json& value, const Target& target,
            std::string_view where) {
  FieldRef field = key.field.get(target);
  switch (key.field.kind) {
    case Kind::kString: {
      if (!value.is_string()) Fail(where, "expected a string, got " + Describe(value));
      const auto& text = value.get_ref<const std::string&>();
      if (!key.choices.empty() && !IsChoice(key.choices, text)) {
        Fail(where, "expected one of " + std::string(key.choices) + ", got '" + Printable(text) +
                        "'");
      }
      if (key.min > 0 && text.empty()) Fail(where, "must not be empty");
      if (static_cast<int64_t>(text.size()) > key.max) {
        Fail(where, "must be at most " + std::to_string(key.max) + " characters");
      }
      *std::get<std::string*>(field) = text;
      return;
    }
    case Kind::kInteger:
    case Kind::kMillis: {
      if (!value.is_number_integer()) Fail(where, "expected an integer, got " + Describe(value));
      if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(kMaxInt64)) {
        Fail(where, "integer out of range");
      }
      auto number = value.get<int64_t>();
      int64_t min = key.field.kind == Kind::kMillis ? std::max<int64_t>(1, key.min) : key.min;
      int64_t max = key.field.kind == Kind::kMillis ? key.max_ms : key.max;
      if (number < min) {
        Fail(where, "must be at least " + std::to_string(min) + ", got " + std::to_string(number));
      }
      if (number > max) {
        Fail(where, "must be at most " + std::to_string(max) + ", got " + std::to_string(number));
      }
      if (auto* ms = std::get_if<Millis*>(&field)) {
        **ms = Millis(number);
      } else if (auto* i = std::get_if<int*>(&field)) {
        **i = static_cast<int>(number);  // max <= kMaxInt for int fields
      } else {
        *std::get<int64_t*>(field) = number;
      }
      return;
    }
    case Kind::kBool:
      if (!value.is_boolean()) Fail(where, "expected true or false, got " + Describe(value));
      *std::get<bool*>(field) = value.get<bool>();
      return;
    case Kind::kStringList: {
      if (!value.is_array()) Fail(where, "expected an array of strings, got " + Describe(value));
      std::vector<std::string> list;
      for (size_t i = 0; i < value.size(); ++i) {
        const std::string item_where = std::string(where) + "[" + std::to_string(i) + "]";
        if (!value[i].is_string()) Fail(item_where, "expected a string, got " + Describe(value[i]));
        const auto& text = value[i].get_ref<const std::string&>();
        if (key.min > 0 && text.empty()) Fail(item_where, "must not be empty");
        if (static_cast<int64_t>(text.size()) > key.max) {
          Fail(item_where, "must be at most " + std::to_string(key.max) + " characters");
        }
        list.push_back(text);
      }
      *std::get<std::vector<std::string>*>(field) = std::move(list);
      return;
    }
    case Kind::kDatasources:
    case Kind::kTopics:
    case Kind::kSteps:
    case Kind::kSchedules:
    case Kind::kCaptures:
    case Kind::kWeights:
      break;
  }
  Fail(where, "internal error: structured key assigned as a scalar");
}

// The field's current value as JSON, so Validate can re-check it with Assign.
json CurrentValue(const KeyDescriptor& key, const Target& target) {
  return std::visit(
      [](auto* field) -> json {
        if constexpr (std::is_same_v<decltype(field), Millis*>) {
          return field->count();
        } else {
          return *field;
        }
      },
      key.field.get(target));
}

// The key's environment variable: `env` where the table names one, else for a scalar
// top-level key DSYNC_ + its path upper-cased with '.' -> '_'
// (registry.offline_timeout_ms: DSYNC_REGISTRY_OFFLINE_TIMEOUT_MS); "" for none.
std::string EnvName(const KeyDescriptor& key) {
  if (!key.env.empty()) return std::string(key.env);
  if (IsStructured(key) || key.field.scope != Scope::kSettings) return "";
  std::string name = "DSYNC_";
  for (char c : key.path) name += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

// The key's default as JSON text: its field's initialiser, or the table's text for a
// structured key; "" when there is no fixed default.
std::string DefaultText(const KeyDescriptor& key) {
  if (IsStructured(key)) return std::string(key.default_text);
  if (key.required || key.no_default) return "";
  Settings settings;
  TopicSettings topic;
  StepSpec step;
  return CurrentValue(key, Target{.settings = &settings, .topic = &topic, .step = &step}).dump();
}

// An environment variable's text (the variable `name`) as the JSON value the key expects.
json FromEnvText(const KeyDescriptor& key, const std::string& name, const std::string& text) {
  switch (key.field.kind) {
    case Kind::kInteger:
    case Kind::kMillis: {
      int64_t number = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
      if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
        Fail(name, "expected an integer, got '" + Printable(text) + "'");
      }
      return number;
    }
    case Kind::kBool:
      if (text == "true") return true;
      if (text == "false") return false;
      Fail(name, "expected true or false, got '" + Printable(text) + "'");
    case Kind::kStringList: {  // "a, b" -> ["a", "b"]; "" -> []
      json list = json::array();
      size_t start = 0;
      while (start <= text.size() && !text.empty()) {
        size_t comma = text.find(',', start);
        if (comma == std::string::npos) comma = text.size();
        std::string item = text.substr(start, comma - start);
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        list.push_back(item);
        start = comma + 1;
      }
      return list;
    }
    default:
      return text;
  }
}

// Every key of `scope` (and `section`) marked required must be a member of `object`.
void RequireKeys(const json& object, Scope scope, std::string_view section,
                 const std::string& prefix) {
  for (const auto& key : kKeys) {
    if (key.field.scope != scope || !key.required) continue;
    if (scope == Scope::kSettings && Section(key.path) != section) continue;
    if (!object.contains(Leaf(key.path))) Fail(prefix + std::string(Leaf(key.path)), "required");
  }
}

// ---- structured keys ----------------------------------------------------------------

bool IsTopicName(std::string_view name) {
  if (name.empty() || name.size() > 50) return false;  // distribute_event.topic is VARCHAR(50)
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// ---- issue 37: a datasource with a limit, and fairness.weights ----
void ParseLimitedDatasource(const json& object, const std::string& name, const std::string& where,
                            Settings& settings) {
  if (!object.contains("url")) Fail(where + ".url", "required");
  for (const auto& [key, member] : object.items()) {
    const std::string member_where = where + "." + Printable(key);
    if (key == "url") {
      if (!member.is_string()) Fail(member_where, "expected a string, got " + Describe(member));
      if (member.get_ref<const std::string&>().empty()) Fail(member_where, "must not be empty");
      settings.datasources[name] = member.get<std::string>();
    } else if (key == "max_concurrent_steps") {
      if (!member.is_number_integer()) Fail(member_where, "expected an integer, got " + Describe(member));
      const int64_t n = member.is_number_unsigned() && member.get<uint64_t>() > uint64_t(kMaxInt64)
                            ? kMaxInt64 : member.get<int64_t>();
      if (n < 1 || n > 100000) Fail(member_where, "must be from 1 to 100000, got " + std::to_string(n));
      settings.datasource_limits[name] = static_cast<int>(n);
    } else {
      Fail(member_where, "unknown key");
    }
  }
}

void ParseWeights(const json& value, const std::string& where, Settings& settings) {
  ExpectObject(value, where);
  for (const auto& [tenant, weight] : value.items()) {
    const std::string item = where + "." + Printable(tenant);
    if (tenant.empty() || tenant.size() > 30) Fail(item, "tenant_id must be 1 to 30 characters");  // VARCHAR(30)
    if (!weight.is_number_integer()) Fail(item, "expected an integer, got " + Describe(weight));
    const int64_t n = weight.is_number_unsigned() && weight.get<uint64_t>() > uint64_t(kMaxInt64)
                          ? kMaxInt64 : weight.get<int64_t>();
    if (n < 1 || n > 1000) Fail(item, "must be from 1 to 1000, got " + std::to_string(n));
    settings.fairness.weights[tenant] = static_cast<int>(n);
  }
}

// concurrency_key: tenant_id, data_id or payload.<field>[.<field>...].
bool IsConcurrencyKey(std::string_view key) {
  if (key == "tenant_id" || key == "data_id") return true;
  if (!key.starts_with("payload.")) return false;
  std::string_view path = key.substr(8);
  if (path.empty() || path.front() == '.' || path.back() == '.') return false;
  char previous = 0;
  for (char c : path) {
    const bool word = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!word && !(c == '.' && previous != '.')) return false;
    previous = c;
  }
  return true;
}
// ---- end of issue 37 ----

void ParseDatasources(const json& value, Settings& settings) {
  ExpectObject(value, "datasources");
  for (const auto& [name, url] : value.items()) {
    std::string where = "datasources." + Printable(name);
    if (name.empty()) Fail(where, "datasource name must not be empty");
    // distribute_event.route lists datasources separated by commas (config/step_datasources.h).
    if (name.find(',') != std::string::npos) Fail(where, "datasource name must not contain ','");
    if (url.is_object()) {  // issue 37: {"url": ..., "max_concurrent_steps": N}
      ParseLimitedDatasource(url, name, where, settings);
      continue;
    }
    if (!url.is_string()) Fail(where, "expected a string or an object, got " + Describe(url));
    if (url.get_ref<const std::string&>().empty()) Fail(where, "must not be empty");
    settings.datasources[name] = url.get<std::string>();
  }
}

std::vector<StepSpec> ParseSteps(const json& value, const std::string& where) {
  if (!value.is_array()) Fail(where, "expected an array, got " + Describe(value));
  if (value.empty()) Fail(where, "must list at least one step");
  std::vector<StepSpec> steps;
  std::set<std::string> names;
  for (size_t i = 0; i < value.size(); ++i) {
    std::string step_path = where + "[" + std::to_string(i) + "]";
    const json& object = value[i];
    ExpectObject(object, step_path);
    StepSpec step;
    for (const auto& [name, member] : object.items()) {
      const KeyDescriptor* key = FindKey(Scope::kStep, "", name);
      if (key == nullptr) {
        step.params[name] = member;  // type-specific; the step type validates it
      } else {
        Assign(*key, member, Target{.step = &step}, step_path + "." + name);
      }
    }
    RequireKeys(object, Scope::kStep, "", step_path + ".");
    if (!names.insert(step.name).second) {
      Fail(step_path + ".name", "duplicate step name '" + Printable(step.name) + "'");
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

TopicSettings ParseTopic(const json& value, const std::string& where) {
  ExpectObject(value, where);
  TopicSettings topic;
  for (const auto& [name, member] : value.items()) {
    std::string member_path = where + "." + Printable(name);
    const KeyDescriptor* key = FindKey(Scope::kTopic, "", name);
    if (key == nullptr) Fail(member_path, "unknown key");
    if (key->field.kind == Kind::kSteps) {
      topic.steps = ParseSteps(member, member_path);
    } else {
      Assign(*key, member, Target{.topic = &topic}, member_path);
    }
  }
  RequireKeys(value, Scope::kTopic, "", where + ".");
  return topic;
}

void ParseTopics(const json& value, Settings& settings) {
  ExpectObject(value, "topics");
  for (const auto& [name, topic] : value.items()) {
    std::string where = "topics." + Printable(name);
    if (!IsTopicName(name)) {
      Fail(where, "topic name must be 1 to 50 characters of A-Z a-z 0-9 _ . -");
    }
    if (name.rfind("dsync.", 0) == 0) {
      Fail(where, "topic names starting with \"dsync.\" are reserved for dsync's own topics");
    }
    settings.topics[name] = ParseTopic(topic, where);
  }
}

void ParseSection(const json& value, std::string_view section, Settings& settings) {
  ExpectObject(value, section);
  for (const auto& [name, member] : value.items()) {
    std::string where = std::string(section) + "." + Printable(name);
    const KeyDescriptor* key = FindKey(Scope::kSettings, section, name);
    if (key == nullptr) Fail(where, "unknown key");
    if (key->field.kind == Kind::kWeights) {  // issue 37
      ParseWeights(member, where, settings);
      continue;
    }
    Assign(*key, member, Target{.settings = &settings}, where);
  }
}

void ParseRoot(const json& root, Settings& settings) {
  if (!root.is_object()) {
    throw ConfigError("config: expected a JSON object at the top level, got " + Describe(root));
  }
  for (const auto& [name, member] : root.items()) {
    if (IsSectionName(name)) {
      ParseSection(member, name, settings);
      continue;
    }
    const KeyDescriptor* key = FindKey(Scope::kSettings, "", name);
    if (key == nullptr) Fail(Printable(name), "unknown key");
    switch (key->field.kind) {
      case Kind::kDatasources: ParseDatasources(member, settings); break;
      case Kind::kTopics: ParseTopics(member, settings); break;
      case Kind::kSchedules: settings.schedules = ParseSchedules(member); break;  // issue 37
      case Kind::kCaptures: settings.captures = ParseCaptures(member); break;
      default: Assign(*key, member, Target{.settings = &settings}, name); break;
    }
  }
  RequireKeys(root, Scope::kSettings, "", "");
}

void ApplyEnvironment(const EnvMap& env, Settings& settings) {
  for (const auto& key : kKeys) {
    const std::string name = EnvName(key);
    if (name.empty()) continue;
    auto found = env.find(name);
    if (found == env.end()) continue;
    Assign(key, FromEnvText(key, name, found->second), Target{.settings = &settings}, name);
  }
}

// A cross-field rule between two durations: unless `holds`, "config: <first> (<ms>)
// must be <relation> <second> (<ms>)".
void RequireOrder(bool holds, const std::string& first, Millis first_value, std::string_view relation,
                  const std::string& second, Millis second_value) {
  if (holds) return;
  throw ConfigError("config: " + first + " (" + std::to_string(first_value.count()) + ") must be " +
                    std::string(relation) + " " + second + " (" + std::to_string(second_value.count()) + ")");
}

// api.listen is HOST:PORT; HOST may be a bracketed IPv6 address.
bool IsHostPort(std::string_view listen) {
  auto colon = listen.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view port = listen.substr(colon + 1);
  int number = 0;
  auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), number);
  return error == std::errc() && end == port.data() + port.size() && !port.empty() &&
         number >= 1 && number <= 65535;
}

}  // namespace

void Settings::Validate() const {
  // Flags are applied after parsing, so every value is checked again against its key's
  // type limits (on a copy: the table's accessors hand out mutable fields).
  Settings copy = *this;
  for (const auto& key : kKeys) {
    if (IsStructured(key) || key.field.scope != Scope::kSettings) continue;
    Target target{.settings = &copy};
    Assign(key, CurrentValue(key, target), target, key.path);
  }
  for (auto& [name, topic] : copy.topics) {
    for (const auto& key : kKeys) {
      if (IsStructured(key) || key.field.scope != Scope::kTopic) continue;
      Target target{.topic = &topic};
      const json value = CurrentValue(key, target);
      if (key.no_default && value == 0) continue;  // unset: another key's value applies (step_timeout_ms)
      Assign(key, value, target, "topics." + Printable(name) + "." + std::string(Leaf(key.path)));
    }
  }

  RequireOrder(registry.heartbeat_interval.count() <= registry.offline_timeout.count() / 2,
               "registry.heartbeat_interval_ms", registry.heartbeat_interval, "at most half of",
               "registry.offline_timeout_ms", registry.offline_timeout);
  RequireOrder(registry.offline_timeout < registry.purge_after, "registry.offline_timeout_ms",
               registry.offline_timeout, "less than", "registry.purge_after_ms", registry.purge_after);
  RequireOrder(dispatcher.poll_interval <= dispatcher.idle_interval, "dispatcher.poll_interval_ms",
               dispatcher.poll_interval, "at most", "dispatcher.idle_interval_ms", dispatcher.idle_interval);
  RequireOrder(dispatcher.busy_interval <= dispatcher.poll_interval, "dispatcher.busy_interval_ms",
               dispatcher.busy_interval, "at most", "dispatcher.poll_interval_ms", dispatcher.poll_interval);
  for (const auto& [name, topic] : topics) {
    const std::string prefix = "topics." + Printable(name);
    RequireOrder(topic.backoff_base <= topic.backoff_max, prefix + ".backoff_base_ms", topic.backoff_base,
                 "at most", prefix + ".backoff_max_ms", topic.backoff_max);
    // issue 37: a key and its limit go together.
    if (!topic.concurrency_key.empty() && !IsConcurrencyKey(topic.concurrency_key)) {
      Fail(prefix + ".concurrency_key", "expected tenant_id, data_id or payload.<field> (A-Z a-z 0-9 _, dotted), got '" +
                                            Printable(topic.concurrency_key) + "'");
    }
    if (topic.concurrency_key.empty() != (topic.concurrency_limit == 0)) {
      Fail(prefix + (topic.concurrency_key.empty() ? ".concurrency_key" : ".concurrency_limit"),
           "concurrency_key and concurrency_limit go together: set both or neither");
    }
  }
  // --- issue 37: a schedule produces events of a configured topic ---
  for (const auto& [name, schedule] : schedules) {
    if (!topics.empty() && !topics.count(schedule.topic)) {
      Fail("schedules." + Printable(name) + ".topic", "unknown topic '" + Printable(schedule.topic) + "' (not in topics)");
    }
  }
  // --- end issue 37 ---
  ValidateCaptures(captures, datasources);
  if (!IsHostPort(api.listen)) {
    Fail("api.listen", "expected HOST:PORT with a port from 1 to 65535, got '" +
                           Printable(api.listen) + "'");
  }
  if (!wakeup::ParseEndpoint(dispatcher.wakeup_listen, /*allow_port_zero=*/true)) {
    Fail("dispatcher.wakeup_listen", "expected HOST:PORT with a port from 0 to 65535, got '" +
                                         Printable(dispatcher.wakeup_listen) + "'");
  }
  if (!consumer.wakeup_listen.empty() && !wakeup::ParseEndpoint(consumer.wakeup_listen)) {
    Fail("consumer.wakeup_listen", "expected HOST:PORT with a port from 1 to 65535, got '" +
                                       Printable(consumer.wakeup_listen) + "'");
  }
}

EnvMap Environment() {
  EnvMap env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    auto eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return env;
}

Settings ParseSettings(const std::string& json_text, const EnvMap& env) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& error) {
    throw ConfigError(Printable("config: not valid JSON: " + ParserMessage(error), 1024));
  }
  Settings settings;
  ParseRoot(root, settings);
  ApplyEnvironment(env, settings);
  return settings;
}

Settings LoadSettings(const std::string& path, const EnvMap& env) {
  if (path.empty()) {
    Settings settings;
    ApplyEnvironment(env, settings);
    return settings;
  }
  auto cannot_read = [&path](int error) {
    return ConfigError("config: cannot read " + Printable(path, 1024) + ": " +
                       std::strerror(error));
  };
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) throw cannot_read(errno);
  std::string text;
  char buffer[65536];
  size_t count;
  while ((count = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) text.append(buffer, count);
  if (std::ferror(file.get())) throw cannot_read(errno);
  return ParseSettings(text, env);
}

const std::vector<SettingKey>& AllSettingKeys() {
  static const std::vector<SettingKey> keys = [] {
    std::vector<SettingKey> all;
    for (const auto& key : kKeys) {
      all.push_back({std::string(key.path), DefaultText(key), EnvName(key),
                     std::string(key.doc)});
    }
    return all;
  }();
  return keys;
}

}  // namespace dsync
