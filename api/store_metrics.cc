// api::WriteDatabaseMetrics: what /metrics reads from the framework database on each
// scrape, through api::EventStore.
#include <map>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "api/event_store.h"
#include "api/verify_service.h"
#include "core/error.h"
#include "events/status.h"

namespace dsync::api {

void WriteDatabaseMetrics(EventStore& store, metrics::TextWriter& w) {
  using metrics::Type;
  api::Health h = store.CheckHealth();
  w.Family("dsync_database_up", "1 when the framework database answered this scrape.", Type::kGauge);
  w.Sample("dsync_database_up", {}, h.database_ok ? 1 : 0);
  if (!h.database_ok) return;
  w.Family("dsync_schema_version", "Applied schema migration version.", Type::kGauge);
  w.Sample("dsync_schema_version", {}, h.schema_version);
  w.Family("dsync_lease_held", "1 when some dispatcher holds an unexpired lease (database view).", Type::kGauge);
  w.Sample("dsync_lease_held", {}, h.lease.held ? 1 : 0);
  w.Family("dsync_lease_token", "Fencing token of the current or last lease tenure.", Type::kGauge);
  w.Sample("dsync_lease_token", {}, static_cast<double>(h.lease.token));
  w.Family("dsync_lease_expires_in_seconds", "Time left on the held lease; 0 when free.", Type::kGauge);
  w.Sample("dsync_lease_expires_in_seconds", {}, static_cast<double>(h.lease.expires_in_ms) / 1000.0);
  try {
    auto counts = store.CountByTopicStatus();
    std::map<std::string, std::map<std::string, int64_t>> by_topic;
    for (const auto& [topic, status, n] : counts) by_topic[topic][status] = n;
    w.Family("dsync_events", "Events by topic and status.", Type::kGauge);
    for (const auto& [topic, statuses] : by_topic) {
      for (events::EventStatus s : events::kEventStatuses) {
        const std::string& status = events::ToText(s);
        auto it = statuses.find(status);
        w.Sample("dsync_events", {{"topic", topic}, {"status", status}},
                 static_cast<double>(it == statuses.end() ? 0 : it->second));
      }
    }
    std::map<std::string, int64_t> nodes{{"online", 0}, {"draining", 0}, {"offline", 0}};
    int64_t in_flight = 0;
    for (const auto& n : store.Nodes(true)) {
      nodes[n.status]++;
      in_flight += n.in_flight;
    }
    w.Family("dsync_nodes", "Registered consumer nodes of the service by status.", Type::kGauge);
    for (const auto& [status, n] : nodes) w.Sample("dsync_nodes", {{"status", status}}, static_cast<double>(n));
    w.Family("dsync_nodes_in_flight_events", "Events ASSIGNED, RUNNING or COMPENSATING on the service's nodes.",
             Type::kGauge);
    w.Sample("dsync_nodes_in_flight_events", {}, static_cast<double>(in_flight));
  } catch (const Error& e) {
    spdlog::warn("METRICS_DB_ERROR err={}", e.what());
  }
  try {
    // Every reason of v_events_needing_attention, 0 when none; each counted by its own
    // index-backed statement (events/rows.h), up to kAttentionCap.
    constexpr int64_t kAttentionCap = 10000;
    const auto counts = store.CountNeedingAttention(kAttentionCap);
    w.Family("dsync_events_needing_attention",
             "Events that cannot make progress or need a look, by reason (v_events_needing_attention); "
             "each reason counted up to 10000.",
             Type::kGauge);
    for (const auto& [reason, n] : counts) {
      w.Sample("dsync_events_needing_attention", {{"reason", reason}}, static_cast<double>(n));
    }
  } catch (const Error& e) {
    spdlog::warn("METRICS_ATTENTION_ERROR err={}", e.what());
  }
  try {
    // The latest verify result per (topic or table, filter, table) (V013).
    // One series per (subject, table, target): the newest of its filters.
    std::vector<LatestVerify> latest;
    std::set<std::string> seen;
    for (auto& v : ReadLatestVerify(store.pool())) {
      if (seen.insert(v.subject_kind + '\n' + v.subject + '\n' + v.table_name + '\n' + v.target).second) {
        latest.push_back(std::move(v));
      }
    }
    w.Family("dsync_verify_last_equal", "1 when the latest verify of the table found it equal, else 0.",
             Type::kGauge);
    for (const auto& v : latest) {
      w.Sample("dsync_verify_last_equal",
               {{"subject", v.subject}, {"kind", v.subject_kind}, {"table", v.table_name}, {"target", v.target}},
               v.equal ? 1 : 0);
    }
    w.Family("dsync_verify_last_differences", "Rows the latest verify of the table found differing.",
             Type::kGauge);
    for (const auto& v : latest) {
      w.Sample("dsync_verify_last_differences",
               {{"subject", v.subject}, {"kind", v.subject_kind}, {"table", v.table_name}, {"target", v.target}},
               static_cast<double>(v.differences));
    }
    w.Family("dsync_verify_last_age_seconds", "Time since the latest verify of the table finished.",
             Type::kGauge);
    for (const auto& v : latest) {
      w.Sample("dsync_verify_last_age_seconds",
               {{"subject", v.subject}, {"kind", v.subject_kind}, {"table", v.table_name}, {"target", v.target}},
               v.age_seconds);
    }
  } catch (const Error& e) {
    spdlog::warn("METRICS_VERIFY_ERROR err={}", e.what());
  }
}

}  // namespace dsync::api
