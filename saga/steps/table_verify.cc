#include "saga/steps/table_verify.h"

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/clock.h"
#include "core/error.h"
#include "saga/steps/table_steps.h"
#include "table/text.h"
#include "table/relay_verify.h"
#include "table/verify.h"

namespace dsync::saga {
namespace {

using nlohmann::json;
using table::JsonKind;
using table::kMaxRepairKeys;
using table::kMaxRepairKeyValues;
using table::ParseTableCheck;
using table::Printable;
using table::Row;
using table::TableCheck;
using table::TableDiff;
using table::VerifyInputError;
using table::VerifyOptions;

// ---------------------------------------------------------------------------
// table_verify

class TableVerifyStep final : public StepHandler {
 public:
  TableVerifyStep(TableCheck check, std::shared_ptr<const RelayEnvironment> relay)
      : check_(std::move(check)), relay_(std::move(relay)) {}

  StepResult Execute(StepContext& ctx) override {
    try {
      const TableDiff d = Compare(ctx);
      json out = d.ToJson(5);
      if (d.equal()) return StepResult::Ok(std::move(out));
      std::string first;
      auto add = [&](const char* what, const std::vector<Row>& keys) {
        if (!keys.empty() && first.empty()) first = std::string(" (first ") + what + ": " + d.KeyJson(keys[0]).dump() + ")";
      };
      add("missing", d.missing);
      add("extra", d.extra);
      add("different", d.different);
      return StepResult::Permanent("table_verify " + check_.step + ": " + check_.source + "." + check_.table +
                                   " and " + check_.target + "." + check_.table + " differ: " +
                                   std::to_string(d.missing_total) + " missing in target, " +
                                   std::to_string(d.extra_total) + " extra in target, " +
                                   std::to_string(d.different_total) + " different" + first);
    } catch (const VerifyInputError& e) {
      return StepResult::Permanent("table_verify " + check_.step + ": " + e.what());
    } catch (const UsageError& e) {
      return StepResult::Permanent("table_verify " + check_.step + ": " + e.what());
    } catch (const table::PermanentError& e) {
      return StepResult::Permanent("table_verify " + check_.step + ": " + e.what());
    } catch (const table::Interrupted& e) {
      return StepResult::Transient("table_verify " + check_.step + ": " + e.what());
    } catch (const DbError& e) {
      if (e.kind() == DbError::Kind::kNoSuchTable || e.code() == 1054) {
        return StepResult::Permanent("table_verify " + check_.step + ": " + e.what());
      }
      throw;
    }
  }

  // Verifying writes nothing.
  StepResult Compensate(StepContext&) override { return StepResult::Ok(); }

 private:
  static constexpr size_t kKeepKeys = 5;

  // Direct when this node reaches both sides; across the gap (table/relay_verify.h) when
  // its config names the target but not the source: this node computes the target's
  // side, a node reaching the source the source's, as an event of dsync.relay_source.
  TableDiff Compare(StepContext& ctx) {
    if (relay_ && !ctx.datasources().Has(check_.source) && ctx.datasources().Has(check_.target)) {
      StepRunContext run(ctx);
      table::RelayTable relay(*relay_->framework);
      table::RelayedSyncOptions options = relay_->options;
      options.node = relay_->node;
      const std::string& code = ctx.idempotency_key();
      return table::RunRelayedVerify(run, check_, relay, options, kKeepKeys, [&](int epoch) {
        ProduceRelaySourceHalf(*relay_->framework, relay_->service, code, epoch,
                               table::VerifySourcePayload(check_, code, epoch, ctx.payload()), check_.source);
        if (relay_->wake_dispatcher) relay_->wake_dispatcher();
      });
    }
    VerifyOptions options;
    options.keep_keys = kKeepKeys;
    options.stop = ctx.stop_token();
    return table::CompareTable(ctx.datasources().Get(check_.source), ctx.datasources().Get(check_.target), check_,
                               ctx.payload(), options, ctx.clock());  // the clock paces the range sizes
  }

  const TableCheck check_;
  const std::shared_ptr<const RelayEnvironment> relay_;
};

// ---------------------------------------------------------------------------
// table_repair

// A context whose payload is the repair's generated one; everything else forwards.
class PayloadContext final : public StepContext {
 public:
  PayloadContext(StepContext& inner, json payload) : inner_(inner), payload_(std::move(payload)) {}
  const std::string& event_code() const override { return inner_.event_code(); }
  const std::string& step_name() const override { return inner_.step_name(); }
  const std::string& idempotency_key() const override { return inner_.idempotency_key(); }
  const json& payload() const override { return payload_; }
  int attempt() const override { return inner_.attempt(); }
  int step_retry_count() const override { return inner_.step_retry_count(); }
  const json& compensation_data() const override { return inner_.compensation_data(); }
  Clock::TimePoint deadline() const override { return inner_.deadline(); }
  Clock& clock() override { return inner_.clock(); }
  std::stop_token stop_token() const override { return inner_.stop_token(); }
  storage::Connection& tx() override { return inner_.tx(); }
  bool StillOwner() override { return inner_.StillOwner(); }
  Datasources& datasources() override { return inner_.datasources(); }
  void InsertAtCommit(std::string_view head, std::string_view tail, std::vector<storage::Value> row) override {
    inner_.InsertAtCommit(head, tail, std::move(row));
  }
  void ReportProgress(const json& progress) override { inner_.ReportProgress(progress); }

 private:
  StepContext& inner_;
  json payload_;
};

class TableRepairStep final : public StepHandler {
 public:
  TableRepairStep(std::string name, std::shared_ptr<const std::map<std::string, TopicSettings>> topics)
      : name_(std::move(name)), topics_(std::move(topics)) {}

  StepResult Execute(StepContext& ctx) override {
    return Run(ctx, [](StepHandler& h, StepContext& c) { return h.Execute(c); });
  }
  StepResult Compensate(StepContext& ctx) override {
    return Run(ctx, [](StepHandler& h, StepContext& c) { return h.Compensate(c); });
  }

 private:
  template <class F>
  StepResult Run(StepContext& ctx, F&& f) {
    std::unique_ptr<StepHandler> sync;
    json payload;
    try {
      std::tie(sync, payload) = Build(ctx);
    } catch (const VerifyInputError& e) {
      return Refuse(ctx, e.what());
    } catch (const ConfigError& e) {
      return Refuse(ctx, e.what());
    }
    PayloadContext inner(ctx, std::move(payload));
    return f(*sync, inner);
  }

  StepResult Refuse(StepContext& ctx, const std::string& why) const {
    spdlog::warn("TABLE_REPAIR_REFUSED event={} step={} err=\"{}\"", ctx.event_code(), name_, why);
    return StepResult::Permanent("table_repair " + name_ + ": " + why);
  }

  // The configured table_sync step a repair names, narrowed to its keys, and the
  // payload it runs with (the where's fields and the keys' values).
  std::pair<std::unique_ptr<StepHandler>, json> Build(StepContext& ctx) const {
    const json& p = ctx.payload();
    if (!p.is_object()) throw VerifyInputError("the payload is not an object");
    for (const auto& [k, _] : p.items()) {
      if (k == "topic" || k == "step" || k == "payload" || k == "keys") continue;
      throw VerifyInputError("payload field '" + Printable(k.substr(0, 64)) +
                             "' is not accepted: a repair names a configured topic and its table_sync step "
                             "('topic', 'step'), the values of its where ('payload') and the keys ('keys'); "
                             "source, target, table and filter are the step's config");
    }
    auto text = [&](const char* k) {
      if (!p.contains(k) || !p[k].is_string()) throw VerifyInputError(std::string("payload field '") + k + "' must be a string");
      return p[k].get<std::string>();
    };
    const std::string topic = text("topic");
    const std::string step = text("step");
    if (topics_ == nullptr || topics_->count(topic) == 0) {
      throw VerifyInputError("topic '" + Printable(topic.substr(0, 64)) + "' is not configured here");
    }
    const StepSpec* spec = nullptr;
    for (const StepSpec& st : topics_->at(topic).steps) {
      if (st.name == step && st.type == "table_sync") spec = &st;
    }
    if (spec == nullptr) {
      throw VerifyInputError("topic '" + topic + "' has no table_sync step '" + Printable(step.substr(0, 64)) + "'");
    }
    const TableCheck check = ParseTableCheck(*spec, "table_sync");
    const json& keys = p.value("keys", json());
    if (!keys.is_array() || keys.empty() || static_cast<int64_t>(keys.size()) > kMaxRepairKeys) {
      throw VerifyInputError("payload field 'keys' must be an array of 1 to " + std::to_string(kMaxRepairKeys) + " keys");
    }
    const json& given = p.value("payload", json::object());
    if (!given.is_object()) throw VerifyInputError("payload field 'payload' must be an object");
    // The key columns are the target table's primary key, as the sync reads it.
    storage::ConnectionPool& target = ctx.datasources().Get(check.target);
    const std::vector<std::string> key_columns = table::DescribeForCheck(target, check.target, check.table).key;
    if (key_columns.empty()) throw VerifyInputError("table " + check.target + "." + check.table + " has no primary key");
    if (static_cast<int64_t>(keys.size() * key_columns.size()) > kMaxRepairKeyValues) {
      throw VerifyInputError("payload field 'keys' holds more than " + std::to_string(kMaxRepairKeyValues) + " values");
    }
    json values = json::object();
    for (const std::string& name : check.where.params) {
      if (name.starts_with("dsync_k")) throw VerifyInputError("the where of step '" + step + "' uses the name :" + name);
      if (given.contains(name)) values[name] = given[name];
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      const json& k = keys[i];
      if (!k.is_array() || k.size() != key_columns.size()) {
        throw VerifyInputError("key " + std::to_string(i) + " is not an array of " +
                               std::to_string(key_columns.size()) + " values (the primary key of " + check.table + ")");
      }
      for (size_t j = 0; j < key_columns.size(); ++j) {
        if (!(k[j].is_string() || k[j].is_number_integer())) {
          throw VerifyInputError("key " + std::to_string(i) + " holds " + JsonKind(k[j]));
        }
        values[RepairKeyField(i, j)] = k[j];
      }
    }
    StepSpec narrowed = *spec;
    narrowed.name = name_;
    return {MakeKeyedTableSyncStep(narrowed, key_columns, keys.size()), std::move(values)};
  }

  const std::string name_;
  const std::shared_ptr<const std::map<std::string, TopicSettings>> topics_;
};

}  // namespace

std::unique_ptr<StepHandler> MakeTableVerifyStep(const StepSpec& spec, std::shared_ptr<const RelayEnvironment> relay) {
  return std::make_unique<TableVerifyStep>(ParseTableCheck(spec, "table_verify"), std::move(relay));
}

std::unique_ptr<StepHandler> MakeTableRepairStep(const StepSpec& spec,
                                                 std::shared_ptr<const std::map<std::string, TopicSettings>> topics) {
  if (!spec.params.is_object() || !spec.params.empty()) {
    throw ConfigError("config: step '" + Printable(spec.name) +
                      "' (table_repair): takes no keys (a repair event names a configured topic's table_sync "
                      "step and its keys)");
  }
  return std::make_unique<TableRepairStep>(spec.name, std::move(topics));
}

}  // namespace dsync::saga
