#include "saga/steps/table_steps.h"

#include <stop_token>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>

#include <spdlog/spdlog.h>

#include "config/step_datasources.h"
#include "core/clock.h"
#include "core/error.h"
#include "events/produce.h"
#include "table/chunk_table.h"
#include "table/delete.h"
#include "table/relay_verify.h"
#include "table/run_context.h"
#include "table/sync.h"
#include "table/undo_table.h"

namespace dsync::saga {
namespace {

using nlohmann::json;

// table::RunContext over the engine's StepContext (the step code is its idempotency
// key); time from the engine's clock (ctx.clock()).

class TableStep : public StepHandler {
 public:
  explicit TableStep(table::Spec spec) : spec_(std::move(spec)) {}

  // Format 1: the before-image in dsync_step_undo (table_delete, and table_sync before chunks).
  StepResult Compensate(StepContext& ctx) override {
    return Guarded(ctx, [&](table::RunContext& run) {
      return StepResult::Ok(table::CompensateFromUndo(run, spec_, undo_table_));
    });
  }

  // Every change is recorded with its before-image in the target as it commits (undo
  // and chunk records, keyed by the step code): an interrupted attempt can be undone.
  bool CompensatesInterrupted() const override { return true; }

 protected:
  // Expected failures become results; transient database errors propagate.
  template <class F>
  StepResult Guarded(StepContext& ctx, F&& body) {
    StepRunContext run(ctx);
    try {
      return body(run);
    } catch (const table::PermanentError& e) {
      return StepResult::Permanent(e.what());
    } catch (const table::Interrupted& e) {
      return StepResult::Transient(e.what());
    } catch (const DbError& e) {
      if (e.kind() == DbError::Kind::kNoSuchTable &&
          std::string(e.what()).find(table::kUndoTable) != std::string::npos) {
        undo_table_.Forget();  // dropped behind our back: recreate on the next try
        throw;
      }
      if (table::IsPermanent(e)) return StepResult::Permanent("step '" + spec_.step + "': " + e.what());
      throw;
    } catch (const UsageError& e) {  // unknown datasource name
      return StepResult::Permanent("step '" + spec_.step + "': " + e.what());
    } catch (const json::exception& e) {  // e.g. a before-image that is not UTF-8
      return StepResult::Permanent("step '" + spec_.step + "': " + e.what());
    }
  }

  const table::Spec spec_;
  table::UndoTable undo_table_;
};

// The topic and step name under which `spec` is configured among `topics` (any topic
// holding an identical step serves: the source half only needs the step's keys).
std::optional<std::pair<std::string, std::string>> FindStep(const std::map<std::string, TopicSettings>& topics,
                                                             const StepSpec& spec) {
  for (const auto& [name, topic] : topics) {
    for (const StepSpec& s : topic.steps) {
      if (s.name == spec.name && s.type == spec.type && s.params == spec.params) return std::make_pair(name, s.name);
    }
  }
  return std::nullopt;
}

class TableSyncStep final : public TableStep {
 public:
  explicit TableSyncStep(table::Spec spec, std::shared_ptr<const RelayEnvironment> relay = nullptr,
                         std::optional<std::pair<std::string, std::string>> where = std::nullopt)
      : TableStep(std::move(spec)), relay_(std::move(relay)), where_(std::move(where)) {}

  StepResult Execute(StepContext& ctx) override {
    // Relayed when this node's config names the target but not the source (and the
    // step is one of the node's configured steps, so a source half can find it).
    if (relay_ && where_ && !ctx.datasources().Has(spec_.source) && ctx.datasources().Has(spec_.target)) {
      return Guarded(ctx, [&](table::RunContext& run) {
        table::RelayTable relay(*relay_->framework);
        table::RelayedSyncOptions options = relay_->options;
        options.node = relay_->node;
        table::SyncResult r = table::RunRelayedTarget(run, spec_, chunk_table_, relay, options,
                                                      [&](int epoch) { StartSourceHalf(ctx, epoch); });
        return StepResult::Ok(std::move(r.output), std::move(r.compensation));
      });
    }
    return Guarded(ctx, [&](table::RunContext& run) {
      table::SyncResult r = table::RunSync(run, spec_, chunk_table_);
      return StepResult::Ok(std::move(r.output), std::move(r.compensation));
    });
  }

  StepResult Compensate(StepContext& ctx) override {
    const json& data = ctx.compensation_data();
    // Images of the single-transaction format (format 1) live in dsync_step_undo.
    if (data.is_object() && data.value("format", 0) == 1) return TableStep::Compensate(ctx);
    return Guarded(ctx, [&](table::RunContext& run) {
      return StepResult::Ok(table::CompensateSync(run, spec_, chunk_table_));
    });
  }

 private:
  // The source half's event of `epoch` (produced once: its code is the epoch's).
  void StartSourceHalf(StepContext& ctx, int epoch) {
    nlohmann::json payload = table::SourceHalfArgs{ctx.idempotency_key(), epoch, ctx.payload()}.ToJson();
    payload["topic"] = where_->first;
    payload["step"] = where_->second;
    const std::string code = ProduceRelaySourceHalf(*relay_->framework, relay_->service, ctx.idempotency_key(), epoch,
                                                    payload, spec_.source);
    if (relay_->wake_dispatcher) relay_->wake_dispatcher();  // assigned now, not at its next poll
    spdlog::info("RELAY_SOURCE_STARTED event={} step={} code={} epoch={} source_event={} route={}",
                 ctx.event_code(), spec_.step, ctx.idempotency_key(), epoch, code, RouteKey({spec_.source}));
  }

  table::ChunkTable chunk_table_;
  std::shared_ptr<const RelayEnvironment> relay_;
  std::optional<std::pair<std::string, std::string>> where_;  // (topic, step) in relay_->topics
};

// The source half of a relayed table_sync (an event of kRelaySourceTopic).
class RelaySourceStep final : public StepHandler {
 public:
  explicit RelaySourceStep(std::shared_ptr<const RelayEnvironment> relay) : relay_(std::move(relay)) {}

  StepResult Execute(StepContext& ctx) override {
    const nlohmann::json& p = ctx.payload();
    if (table::IsVerifySourcePayload(p)) return Run(ctx, "verify", [&](table::RunContext& run) {
      table::RelayTable relay(*relay_->framework);
      return table::RunRelayedVerifySource(run, p, relay, Options());
    });
    if (!p.is_object() || !p.contains("topic") || !p["topic"].is_string() || !p.contains("step") ||
        !p["step"].is_string()) {
      return StepResult::Permanent("relay source half: its payload names no topic and step");
    }
    const std::string topic = p["topic"].get<std::string>();
    const std::string step = p["step"].get<std::string>();
    const StepSpec* found = nullptr;
    auto t = relay_->topics.find(topic);
    if (t != relay_->topics.end()) {
      for (const StepSpec& s : t->second.steps) {
        if (s.name == step && s.type == "table_sync") found = &s;
      }
    }
    if (found == nullptr) {
      return StepResult::Permanent("relay source half: no table_sync step '" + step + "' in topic '" + topic +
                                   "' of this node's config");
    }
    return Run(ctx, step, [&](table::RunContext& run) {
      const table::Spec spec = table::ParseSpec(*found, /*sync=*/true);
      const table::SourceHalfArgs args = table::SourceHalfArgs::FromJson(p);
      table::RelayTable relay(*relay_->framework);
      return table::RunRelayedSource(run, spec, args, relay, Options());
    });
  }

  // Its only effect is rows of the relay tables, which the target half owns.
  StepResult Compensate(StepContext&) override { return StepResult::Ok(); }

 private:
  table::RelayedSyncOptions Options() const {
    table::RelayedSyncOptions options = relay_->options;
    options.node = relay_->node;
    return options;
  }

  // Runs a source half, mapping its failures to step results.
  StepResult Run(StepContext& ctx, const std::string& step,
                 const std::function<nlohmann::json(table::RunContext&)>& half) {
    StepRunContext run(ctx);
    try {
      return StepResult::Ok(half(run));
    } catch (const ConfigError& e) {
      return StepResult::Permanent(e.what());
    } catch (const table::PermanentError& e) {
      return StepResult::Permanent(e.what());
    } catch (const table::Interrupted& e) {
      return StepResult::Transient(e.what());
    } catch (const DbError& e) {
      if (table::IsPermanent(e)) return StepResult::Permanent("relay source half of '" + step + "': " + e.what());
      throw;
    } catch (const UsageError& e) {  // the source is not configured here
      return StepResult::Permanent("relay source half of '" + step + "': " + e.what());
    }
  }

  std::shared_ptr<const RelayEnvironment> relay_;
};


class TableDeleteStep final : public TableStep {
 public:
  using TableStep::TableStep;

  StepResult Execute(StepContext& ctx) override {
    return Guarded(ctx, [&](table::RunContext& run) {
      table::DeleteResult r = table::RunDelete(run, spec_, undo_table_);
      return StepResult::Ok(std::move(r.output), std::move(r.image));
    });
  }
};

}  // namespace

TopicSettings RelaySourceTopic() {
  TopicSettings t;
  t.max_retry = 10;
  t.ordered = false;
  t.max_processing_time = Millis(3600 * 1000);
  StepSpec step;
  step.name = "source";
  step.type = kRelaySourceStepType;
  t.steps.push_back(step);
  return t;
}

std::string RelaySourceCode(const std::string& step_code, int epoch) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  for (unsigned char c : step_code) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return "relay:" + std::string(hex) + ":" + std::to_string(epoch);
}

std::string ProduceRelaySourceHalf(storage::ConnectionPool& framework, const std::string& service,
                                   const std::string& step_code, int epoch, const nlohmann::json& payload,
                                   const std::string& source) {
  events::NewEventRow row;
  row.tenant_id = "dsync";
  row.code = RelaySourceCode(step_code, epoch);
  row.data_id = row.code;  // its own ordering key: never behind its parent's
  row.topic = kRelaySourceTopic;
  row.payload = payload.dump();
  row.service = service;
  row.route = RouteKey({source});
  row.max_retry = RelaySourceTopic().max_retry;
  framework.Run("produce relay source half", [&](storage::Connection& c) {
    if (events::InsertEvent(c, row)) return;
    auto topic = c.QueryString("SELECT topic FROM distribute_event WHERE code = ?", row.code);
    if (topic != std::string(kRelaySourceTopic)) {
      throw table::PermanentError("the relay's source half event code " + row.code +
                                  " is taken by an event of another topic");
    }
  });
  return row.code;
}

std::unique_ptr<StepHandler> MakeTableSyncStep(const StepSpec& spec) {
  return std::make_unique<TableSyncStep>(table::ParseSpec(spec, /*sync=*/true));
}

std::unique_ptr<StepHandler> MakeTableSyncStep(const StepSpec& spec, std::shared_ptr<const RelayEnvironment> relay) {
  std::optional<std::pair<std::string, std::string>> where;
  if (relay) where = FindStep(relay->topics, spec);
  return std::make_unique<TableSyncStep>(table::ParseSpec(spec, /*sync=*/true), std::move(relay), std::move(where));
}

std::unique_ptr<StepHandler> MakeRelaySourceStep(const StepSpec&, std::shared_ptr<const RelayEnvironment> relay) {
  if (!relay || relay->framework == nullptr) throw ConfigError("config: relay_source steps are dsync's own");
  return std::make_unique<RelaySourceStep>(std::move(relay));
}


std::unique_ptr<StepHandler> MakeTableDeleteStep(const StepSpec& spec) {
  return std::make_unique<TableDeleteStep>(table::ParseSpec(spec, /*sync=*/false));
}

std::unique_ptr<StepHandler> MakeKeyedTableSyncStep(const StepSpec& spec, const std::vector<std::string>& key_columns,
                                                    size_t keys) {
  table::Spec s = table::ParseSpec(spec, /*sync=*/true);
  table::NarrowToKeys(s, key_columns, keys);
  return std::make_unique<TableSyncStep>(std::move(s));
}

}  // namespace dsync::saga
