#include "saga/steps/table_steps.h"

#include <stop_token>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "table/chunk_table.h"
#include "table/delete.h"
#include "table/run_context.h"
#include "table/sync.h"
#include "table/undo_table.h"

namespace dsync::saga {
namespace {

using nlohmann::json;

// table::RunContext over the engine's StepContext (the step code is its idempotency
// key); time from the handler's clock.
class StepRunContext final : public table::RunContext {
 public:
  StepRunContext(StepContext& ctx, Clock& clock) : ctx_(ctx), clock_(clock) {}
  const std::string& event_code() const override { return ctx_.event_code(); }
  const std::string& step_code() const override { return ctx_.idempotency_key(); }
  const json& payload() const override { return ctx_.payload(); }
  int attempt() const override { return ctx_.attempt(); }
  const json& compensation_data() const override { return ctx_.compensation_data(); }
  std::stop_token stop_token() const override { return ctx_.stop_token(); }
  bool StillOwner() override { return ctx_.StillOwner(); }
  void ReportProgress(const json& progress) override { ctx_.ReportProgress(progress); }
  storage::ConnectionPool& Pool(const std::string& datasource) override { return ctx_.datasources().Get(datasource); }
  Clock& clock() override { return clock_; }

 private:
  StepContext& ctx_;
  Clock& clock_;
};

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
    StepRunContext run(ctx, clock_);
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
  // The table code's time (checkpoint and progress intervals, chunk sizing).
  SystemClock clock_;
};

class TableSyncStep final : public TableStep {
 public:
  using TableStep::TableStep;

  StepResult Execute(StepContext& ctx) override {
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
  table::ChunkTable chunk_table_;
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

std::unique_ptr<StepHandler> MakeTableSyncStep(const StepSpec& spec) {
  return std::make_unique<TableSyncStep>(table::ParseSpec(spec, /*sync=*/true));
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
