// Rows for the dispatcher's integration tests: registry nodes and events written with
// plain SQL, their times set relative to the database clock (never by sleeping).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/settings.h"
#include "registry/node_metadata.h"
#include "tests/support/test_db.h"

namespace dsync::dispatcher::fixtures {

using testing::TestSchema;

constexpr const char* kService = "kbs-sync";

struct NodeRow {
  std::string address{};
  int capacity = 8;
  int prefetch = 0;
  std::vector<std::string> topics = {"*"};
  int status = 1;            // 0 offline, 1 online, 2 draining
  int64_t age_ms = 0;        // heartbeat this long ago
  int processing_count = 0;
  double load = 0.0;
  double weight = 1.0;
  std::string service = kService;
  std::optional<std::vector<std::string>> datasources{};  // nullopt: not reported (reaches all)
  std::map<std::string, std::string> bad_topics{};
};

inline void AddNode(TestSchema& db, const NodeRow& n) {
  const registry::NodeMetadata md{.version = "test", .weight = n.weight, .capacity = n.capacity,
                                  .prefetch = n.prefetch, .processing_count = n.processing_count,
                                  .load = n.load, .topics = n.topics, .incarnation = n.address + ":test",
                                  .datasources = n.datasources, .bad_topics = n.bad_topics};
  db.pool().Run("add node", [&](storage::Connection& c) {
    c.Execute("INSERT INTO distribute_node_registry (service_name, node_address, status, "
              "last_heartbeat_time, metadata) VALUES (?, ?, ?, NOW(3) - INTERVAL ? MICROSECOND, ?)",
              n.service, n.address, n.status, n.age_ms * 1000, md.ToJson());
  });
}

struct EventRow {
  std::string code{};
  std::string topic = "T";
  std::string tenant = "t1";
  std::string data_id{};     // empty: the code
  std::string status = "PENDING";
  std::optional<std::string> node{};
  int version = 1;
  int priority = 0;
  int64_t next_run_in_s = 0;  // next_run_time = NOW(3) + this
  std::string phase = "FORWARD";
  int retry_count = 0;
  std::string service = kService;
};

inline int64_t AddEvent(TestSchema& db, const EventRow& e) {
  return db.pool().Run("add event", [&](storage::Connection& c) {
    // fair_pending (V029) as the framework's statements write it: 1 exactly while PENDING.
    c.Execute("INSERT INTO distribute_event (tenant_id, code, data_id, topic, status, fair_pending, node_address, "
              "version, priority, next_run_time, phase, retry_count, service) "
              "VALUES (?, ?, ?, ?, ?, ? = 'PENDING', ?, ?, ?, NOW(3) + INTERVAL ? SECOND, ?, ?, ?)",
              e.tenant, e.code, e.data_id.empty() ? e.code : e.data_id, e.topic, e.status, e.status, e.node,
              e.version, e.priority, e.next_run_in_s, e.phase, e.retry_count, e.service);
    return *c.QueryInt("SELECT id FROM distribute_event WHERE code = ?", e.code);
  });
}

// `count` PENDING events of `topic`, each on its own entity, codes prefix-0..N-1.
inline void AddPendingEvents(TestSchema& db, int count, const std::string& topic,
                             const std::string& prefix, int priority = 0) {
  db.pool().Transact("add events", [&](storage::Connection& c) {
    for (int i = 0; i < count; ++i) {
      std::string code = prefix + "-" + std::to_string(i);
      c.Execute("INSERT INTO distribute_event (tenant_id, code, data_id, topic, priority) "
                "VALUES ('t1', ?, ?, ?, ?)",
                code, code, topic, priority);
    }
  });
}

inline std::string Text(TestSchema& db, const std::string& sql) {
  return db.pool()
      .Run("query", [&](storage::Connection& c) { return c.QueryString(sql); })
      .value_or("NULL");
}

inline std::string StatusOf(TestSchema& db, int64_t id) {
  return Text(db, "SELECT status FROM distribute_event WHERE id = " + std::to_string(id));
}
inline int64_t VersionOf(TestSchema& db, int64_t id) {
  return db.QueryInt("SELECT version FROM distribute_event WHERE id = " + std::to_string(id));
}
inline std::string NodeOf(TestSchema& db, int64_t id) {
  return Text(db, "SELECT node_address FROM distribute_event WHERE id = " + std::to_string(id));
}
inline int64_t Count(TestSchema& db, const std::string& where) {
  return db.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE " + where);
}

// Short intervals so services react within tens of milliseconds.
inline Settings TestSettings() {
  Settings s;
  s.service = kService;
  s.registry.offline_timeout = Millis(30000);
  s.registry.sweep_interval = Millis(200);
  s.dispatcher.poll_interval = Millis(20);
  s.dispatcher.idle_interval = Millis(100);
  s.dispatcher.lease_ttl = Millis(3000);
  s.dispatcher.batch_size = 500;
  return s;
}

}  // namespace dsync::dispatcher::fixtures
