// The capture_sync step (saga/steps/capture_step.h).
//
// Thread safety: see the header.
#include "saga/steps/capture_step.h"

#include <chrono>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "capture/apply_metrics.h"
#include "capture/capture_events.h"
#include "core/clock.h"
#include "core/error.h"
#include "saga/steps/table_steps.h"
#include "table/keyed_sync.h"
#include "table/verify.h"

namespace dsync::saga {
namespace {

using nlohmann::json;

// A context whose payload is the sync's generated one; everything else forwards.
class CapturePayloadContext final : public StepContext {
 public:
  CapturePayloadContext(StepContext& inner, json payload) : inner_(inner), payload_(std::move(payload)) {}
  const std::string& event_code() const override { return inner_.event_code(); }
  const std::string& step_name() const override { return inner_.step_name(); }
  const std::string& idempotency_key() const override { return inner_.idempotency_key(); }
  const json& payload() const override { return payload_; }
  int attempt() const override { return inner_.attempt(); }
  int step_retry_count() const override { return inner_.step_retry_count(); }
  const json& compensation_data() const override { return inner_.compensation_data(); }
  std::chrono::steady_clock::time_point deadline() const override { return inner_.deadline(); }
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

// A payload the step cannot use: permanent, nothing written.
class BadCapturePayload : public Error {
 public:
  using Error::Error;
};

// The table descriptions of a node's keyed applies (table::KeyedTable), by capture,
// table and the copy they follow (the events' "schema"): read once, not per event. An
// entry goes when an apply of its table fails (a schema changed under it fails its
// statements, and the retry describes again) and when a copy of its table runs here;
// events of a resume's copy and after it name another copy, so a description taken
// before the operator aligned the target is never used for them.
class Descriptions {
 public:
  std::shared_ptr<const table::KeyedTable> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : it->second;
  }
  void Put(const std::string& key, std::shared_ptr<const table::KeyedTable> t) {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= kMaxEntries) map_.clear();
    map_[key] = std::move(t);
  }
  // Every entry whose key begins with `prefix`.
  void Drop(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = map_.lower_bound(prefix); it != map_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      it = map_.erase(it);
    }
  }

 private:
  static constexpr size_t kMaxEntries = 256;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const table::KeyedTable>> map_;
};

class CaptureSyncStep final : public StepHandler {
 public:
  CaptureSyncStep(std::string name, std::shared_ptr<const std::map<std::string, CaptureSettings>> captures)
      : name_(std::move(name)), captures_(std::move(captures)) {}

  StepResult Execute(StepContext& ctx) override {
    const json& p = ctx.payload();
    if (p.is_object() && !p.value("copy", false)) return Apply(ctx);
    // The initial copy (or a resume's): table_sync over the whole table. The table may
    // have changed: this node describes it again for the events after the copy.
    if (p.is_object() && p.contains("capture") && p["capture"].is_string() && p.contains("table") &&
        p["table"].is_string()) {
      descriptions_.Drop(TablePrefix(p["capture"].get<std::string>(), p["table"].get<std::string>()));
    }
    StepResult r = Run(ctx, [](StepHandler& h, StepContext& c) { return h.Execute(c); });
    if (r.kind == StepResult::Kind::kOk) CountApplied(ctx);
    return r;
  }
  // As table_sync compensates (its chunk records), over the event's keys.
  StepResult Compensate(StepContext& ctx) override {
    return Run(ctx, [](StepHandler& h, StepContext& c) { return h.Compensate(c); });
  }

 private:
  static std::string TablePrefix(const std::string& capture, const std::string& table) {
    return capture + '\n' + table + '\n';
  }

  // A keyed event: table::RunKeyedSync over the node's description of the table.
  StepResult Apply(StepContext& ctx) {
    StepRunContext run(ctx);
    std::string key;
    // Any failure drops the table's description: the retry describes it again.
    struct ForgetUnlessApplied {
      CaptureSyncStep& step;
      const std::string& key;
      bool applied = false;
      ~ForgetUnlessApplied() {
        if (!applied) step.Forget(key);
      }
    } guard{*this, key};
    try {
      const Keyed k = ParseKeyed(ctx.payload());
      key = TablePrefix(k.capture, k.spec.table) + k.schema;
      auto fresh = [&] {
        std::shared_ptr<const table::KeyedTable> t = table::DescribeKeyed(run, k.spec);
        descriptions_.Put(key, t);
        return t;
      };
      auto apply = [&](const table::KeyedTable& t) { return table::RunKeyedSync(run, t, KeyRows(t, *k.keys), chunks_); };
      std::shared_ptr<const table::KeyedTable> t = descriptions_.Find(key);
      table::SyncResult r;
      if (!t) {
        r = apply(*fresh());
      } else {
        // A description taken before the table changed fails for good (an unknown
        // column): once more with the table as it is now.
        try {
          r = apply(*t);
        } catch (const table::PermanentError&) {
          r = apply(*fresh());
        } catch (const DbError& e) {
          if (!table::IsPermanent(e)) throw;
          r = apply(*fresh());
        }
      }
      CountApplied(ctx);
      guard.applied = true;
      return StepResult::Ok(std::move(r.output), std::move(r.compensation));
    } catch (const BadCapturePayload& e) {
      return Refuse(ctx, e.what());
    } catch (const ConfigError& e) {
      return Refuse(ctx, e.what());
    } catch (const table::PermanentError& e) {
      return StepResult::Permanent(e.what());
    } catch (const table::Interrupted& e) {
      return StepResult::Transient(e.what());
    } catch (const DbError& e) {
      if (e.kind() == DbError::Kind::kNoSuchTable &&
          std::string(e.what()).find(table::kChunkTable) != std::string::npos) {
        chunks_.Forget();  // dropped behind our back: created again on the next try
        throw;
      }
      if (table::IsPermanent(e)) return StepResult::Permanent("step '" + name_ + "': " + e.what());
      throw;
    } catch (const UsageError& e) {  // an unknown datasource
      return StepResult::Permanent("step '" + name_ + "': " + e.what());
    } catch (const json::exception& e) {
      return StepResult::Permanent("step '" + name_ + "': " + e.what());
    }
  }

  void Forget(const std::string& key) {
    if (!key.empty()) descriptions_.Drop(key);
  }

  // A keyed event's capture, sync spec (its table's, not narrowed), keys and copy.
  struct Keyed {
    std::string capture;
    table::Spec spec;
    const json* keys = nullptr;
    std::string schema;
  };

  Keyed ParseKeyed(const json& p) const {
    Keyed k;
    auto [name, spec] = SyncSpec(p);
    k.capture = std::move(name);
    k.spec = table::ParseSpec(spec, /*sync=*/true);
    if (!p.contains("keys") || !p["keys"].is_array() || p["keys"].empty() ||
        static_cast<int64_t>(p["keys"].size()) > table::kMaxRepairKeys) {
      throw BadCapturePayload("'keys' must be an array of 1 to " + std::to_string(table::kMaxRepairKeys) + " keys");
    }
    k.keys = &p["keys"];
    if (p.contains("schema") && p["schema"].is_string()) k.schema = p["schema"].get<std::string>();
    return k;
  }

  // The payload's keys as rows of the table's primary key (text cells).
  std::vector<table::Row> KeyRows(const table::KeyedTable& t, const json& keys) const {
    const table::ColumnSet& key = t.plan.tgt_key;
    const std::string label = t.spec.target + "." + t.spec.table;
    if (key.size() == 0) throw BadCapturePayload("table " + label + " has no primary key");
    std::vector<table::Row> rows;
    rows.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const json& k = keys[i];
      if (!k.is_array() || k.size() != key.size()) {
        throw BadCapturePayload("key " + std::to_string(i) + " does not have the " + std::to_string(key.size()) +
                                " values of the primary key of " + label + " (did the key change? pause and align the table)");
      }
      table::Row row;
      row.reserve(k.size());
      for (size_t j = 0; j < k.size(); ++j) {
        if (k[j].is_string()) {
          row.emplace_back(k[j].get<std::string>());
        } else if (k[j].is_number_integer()) {
          row.emplace_back(k[j].is_number_unsigned() ? std::to_string(k[j].get<uint64_t>())
                                                     : std::to_string(k[j].get<int64_t>()));
        } else {
          throw BadCapturePayload("key " + std::to_string(i) + " holds a value that is not a string or an integer");
        }
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

  template <class F>
  StepResult Run(StepContext& ctx, F&& f) {
    std::unique_ptr<StepHandler> sync;
    json payload;
    try {
      std::tie(sync, payload) = Build(ctx);
    } catch (const BadCapturePayload& e) {
      return Refuse(ctx, e.what());
    } catch (const table::VerifyInputError& e) {
      return Refuse(ctx, e.what());
    } catch (const ConfigError& e) {
      return Refuse(ctx, e.what());
    }
    CapturePayloadContext inner(ctx, std::move(payload));
    return f(*sync, inner);
  }

  // /metrics (capture/apply_metrics.h): a keyed event's keys and its lag from the
  // source commit (binlog seconds) to now; a copy event counts no keys.
  void CountApplied(StepContext& ctx) const {
    const json& p = ctx.payload();
    if (!p.is_object() || !p.contains("capture") || !p["capture"].is_string()) return;
    const json& keys = p.value("keys", json());
    std::optional<double> lag;
    if (p.contains("committed_at") && p["committed_at"].is_number_integer() && p["committed_at"].get<int64_t>() > 0) {
      const double now = std::chrono::duration<double>(ctx.clock().WallNow().time_since_epoch()).count();
      lag = now - static_cast<double>(p["committed_at"].get<int64_t>());
    }
    capture::ApplyMetrics::Instance().Applied(p["capture"].get<std::string>(), keys.is_array() ? keys.size() : 0, lag);
  }

  StepResult Refuse(StepContext& ctx, const std::string& why) const {
    spdlog::warn("CAPTURE_SYNC_REFUSED event={} step={} err=\"{}\"", ctx.event_code(), name_, why);
    return StepResult::Permanent("capture_sync " + name_ + ": " + why);
  }

  // The capture's name and the table_sync step of the payload's table (its where, delete_missing).
  std::pair<std::string, StepSpec> SyncSpec(const json& p) const {
    if (!p.is_object() || !p.contains("capture") || !p["capture"].is_string() || !p.contains("table") ||
        !p["table"].is_string()) {
      throw BadCapturePayload("the payload must name a capture and a table");
    }
    const std::string name = p["capture"].get<std::string>();
    const std::string table = p["table"].get<std::string>();
    if (!captures_ || captures_->count(name) == 0) {
      throw BadCapturePayload("capture '" + name.substr(0, 64) + "' is not in this node's config");
    }
    const CaptureSettings& capture = captures_->at(name);
    bool listed = false;
    for (const auto& t : capture.tables) listed = listed || t == table;
    if (!listed) throw BadCapturePayload("table '" + table.substr(0, 64) + "' is not captured by " + name);
    auto where = capture.where.find(table);
    StepSpec spec;
    spec.name = name_;
    spec.type = "table_sync";
    spec.params = {{"source", capture.source}, {"target", capture.target}, {"table", table},
                   {"where", where == capture.where.end() ? std::string("1 = 1") : where->second},
                   {"delete_missing", true}};
    return {name, spec};
  }

  // The copy's table_sync, or (compensation) the keyed table_sync of the event's keys.
  std::pair<std::unique_ptr<StepHandler>, json> Build(StepContext& ctx) const {
    const json& p = ctx.payload();
    auto [name, spec] = SyncSpec(p);
    if (p.value("copy", false)) return {MakeTableSyncStep(spec), json::object()};
    const CaptureSettings& capture = captures_->at(name);
    const std::string& table = spec.params["table"].get_ref<const std::string&>();

    const json& keys = p.value("keys", json());
    if (!keys.is_array() || keys.empty() || static_cast<int64_t>(keys.size()) > table::kMaxRepairKeys) {
      throw BadCapturePayload("'keys' must be an array of 1 to " + std::to_string(table::kMaxRepairKeys) + " keys");
    }
    storage::ConnectionPool& target = ctx.datasources().Get(capture.target);
    const std::vector<std::string> key_columns = table::DescribeForCheck(target, capture.target, table).key;
    if (key_columns.empty()) throw BadCapturePayload("table " + capture.target + "." + table + " has no primary key");
    json values = json::object();
    for (size_t i = 0; i < keys.size(); ++i) {
      const json& k = keys[i];
      if (!k.is_array() || k.size() != key_columns.size()) {
        throw BadCapturePayload("key " + std::to_string(i) + " does not have the " + std::to_string(key_columns.size()) +
                                " values of the primary key of " + capture.target + "." + table +
                                " (did the key change? pause and align the table)");
      }
      for (size_t j = 0; j < k.size(); ++j) {
        if (!(k[j].is_string() || k[j].is_number_integer())) {
          throw BadCapturePayload("key " + std::to_string(i) + " holds a value that is not a string or an integer");
        }
        values[RepairKeyField(i, j)] = k[j];
      }
    }
    return {MakeKeyedTableSyncStep(spec, key_columns, keys.size()), std::move(values)};
  }

  const std::string name_;
  const std::shared_ptr<const std::map<std::string, CaptureSettings>> captures_;
  Descriptions descriptions_;
  table::ChunkTable chunks_;  // dsync_sync_chunk on each target, created once
};

}  // namespace

TopicSettings CaptureTopic() {
  TopicSettings t;
  t.max_retry = capture::kCaptureMaxRetry;
  t.backoff_base = Millis(200);
  t.backoff_max = Millis(5000);
  t.ordered = true;
  StepSpec apply;
  apply.name = "apply";
  apply.type = capture::kCaptureStepType;
  t.steps.push_back(apply);
  return t;
}

std::unique_ptr<StepHandler> MakeCaptureSyncStep(const StepSpec& spec,
                                                 std::shared_ptr<const std::map<std::string, CaptureSettings>> captures) {
  if (!spec.params.is_object() || !spec.params.empty()) {
    throw ConfigError("config: step '" + spec.name + "' (capture_sync): takes no keys (its events name the capture)");
  }
  return std::make_unique<CaptureSyncStep>(spec.name, std::move(captures));
}

void RegisterCaptureStep(StepRegistry& registry, const std::map<std::string, CaptureSettings>& captures) {
  auto shared = std::make_shared<const std::map<std::string, CaptureSettings>>(captures);
  registry.Register(capture::kCaptureStepType, [shared](const StepSpec& spec) { return MakeCaptureSyncStep(spec, shared); });
}

}  // namespace dsync::saga
