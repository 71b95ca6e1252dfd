// `dsync bundle export|import` and `dsync verify --bundle FILE` (table/bundle.h,
// docs/relay.md "Bundles"): a sync carried as a signed file between environments whose
// link passes only files.
//
// export (side A, reaching the source): the rows a topic's table_sync steps select for a
// payload (or one table's), written to --out. import (side B, reaching the target):
// checks the signature, then, holding a named lock on the framework database
// (GET_LOCK: one import of a bundle at a time; it dies with the process), refuses a
// bundle whose event exists (imported before), applies each table through the target
// writer with its undo under the step code "bundle-<id>#<n>", and records the event
// bundle-<id> (topic dsync.bundle) and its steps as SUCCESS in one transaction. A failure
// restores what the import wrote (the undo, last table first) and records nothing: the
// import can be run again. verify --bundle: compares the target with the manifest's
// range checksums (exit 0 equal, 3 different).
//
// Exit codes: 0 done, 2 bad input (a refused bundle: truncated, altered, another key,
// replayed, schema changed), 1 a runtime failure (nothing applied: restored), 3 verify
// found differences.
#include <iostream>
#include <regex>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "app/bundle_command.h"
#include "app/command_support.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "events/finished.h"
#include "saga/step_handler.h"
#include "storage/transaction.h"
#include "table/bundle.h"
#include "table/relay_verify.h"
#include "table/sync.h"

namespace dsync::app {
namespace {

using nlohmann::json;

constexpr int kBundleExitDifferent = 3;
constexpr const char* kBundleEventTopic = "dsync.bundle";
constexpr const char* kBundleTenant = "dsync-bundle";

// The config's datasources as a run context's pools.
table::StandaloneRunContext::Pools PoolsOf(saga::Datasources& pools) {
  return [&pools](const std::string& name) -> storage::ConnectionPool& { return pools.Get(name); };
}

std::string Key(const Settings& s) {
  if (s.bundle.key.empty()) {
    throw UsageError("bundle.key is empty: set it in the config (or DSYNC_BUNDLE_KEY), the same on both sides");
  }
  return s.bundle.key;
}

json JsonOption(const Invocation& inv, const char* name) {
  auto text = inv.Get(name);
  if (!text) return json::object();
  StoredJson parsed = ParseStoredJson(*text, std::string("--") + name, kMaxInputJsonDepth);
  if (parsed.problem != StoredJson::kNone || !parsed.value.is_object()) {
    throw UsageError(std::string("--") + name + " must be a JSON object");
  }
  return std::move(parsed.value);
}

table::BundleExportRequest ExportRequest(const Settings& s, const Invocation& inv) {
  table::BundleExportRequest r;
  if (auto topic = inv.Get("topic")) {
    for (const char* k : {"source", "target", "table", "where", "params"}) {
      if (inv.Get(k)) throw UsageError(std::string("--") + k + " goes with one table, not with --topic");
    }
    auto it = s.topics.find(*topic);
    if (it == s.topics.end()) throw UsageError("unknown topic '" + *topic + "' (not in the config)");
    r.topic = *topic;
    r.payload = JsonOption(inv, "payload");
    for (const StepSpec& st : it->second.steps) {
      if (st.type == "table_sync") r.steps.push_back(st);
    }
    if (r.steps.empty()) throw UsageError("topic '" + *topic + "' has no table_sync step: nothing to export");
    return r;
  }
  if (inv.Get("payload")) throw UsageError("--payload goes with --topic");
  StepSpec st;
  st.name = "table";
  st.type = "table_sync";
  for (const char* k : {"source", "target", "table"}) {
    if (!inv.Get(k)) throw UsageError(std::string("--") + k + " is required (or give --topic and --payload)");
    st.params[k] = *inv.Get(k);
  }
  st.params["where"] = inv.Get("where").value_or("1 = 1");
  r.payload = JsonOption(inv, "params");
  r.steps.push_back(st);
  return r;
}


int RunExport(const Invocation& inv) {
  Settings s = ResolveSettings(inv);
  SetupLogging(inv.Get("log-level").value_or("warn"), "bundle");
  const std::string key = Key(s);
  auto out = inv.Get("out");
  if (!out || out->empty()) throw UsageError("--out FILE is required: where the bundle is written");
  const table::BundleExportRequest request = ExportRequest(s, inv);
  saga::Datasources pools(s.datasources);
  SystemClock clock;
  table::StandaloneRunContext ctx(
      "bundle-export", request.payload,
      PoolsOf(pools), clock);
  json manifest;
  try {
    manifest = table::ExportBundle(ctx, request, *out, key);
  } catch (const table::PermanentError& e) {
    throw UsageError(e.what());
  } catch (const table::BundleError& e) {
    throw Error(e.what());
  }
  int64_t rows = 0;
  for (const json& t : manifest["tables"]) rows += t["rows"].get<int64_t>();
  spdlog::info("BUNDLE_EXPORTED bundle={} file={} tables={} rows={} bytes={}", manifest["bundle_id"].get<std::string>(),
               *out, manifest["tables"].size(), rows, manifest["bytes"].get<uint64_t>());
  if (inv.Flag("json")) {
    json summary = {{"bundle_id", manifest["bundle_id"]}, {"file", *out}, {"rows", rows},
                    {"bytes", manifest["bytes"]}, {"tables", json::array()}};
    for (const json& t : manifest["tables"]) {
      summary["tables"].push_back({{"table", t["table"]}, {"rows", t["rows"]}, {"chunks", t["chunks"].size()}});
    }
    std::cout << summary.dump(2) << "\n";
  } else {
    std::cout << "bundle " << manifest["bundle_id"].get<std::string>() << " written to " << *out << ": "
              << manifest["tables"].size() << " table(s), " << rows << " row(s), " << manifest["bytes"].get<uint64_t>()
              << " bytes\n";
  }
  return 0;
}

// Opens and checks the bundle; a refusal is bad input (exit 2).
table::BundleReader OpenBundle(const std::string& path, const std::string& key) {
  try {
    table::BundleReader r = table::BundleReader::Open(path, key);
    const json& m = r.manifest();
    static const std::regex kId("[0-9a-f]{32}");
    if (!m.contains("bundle_id") || !m["bundle_id"].is_string() ||
        !std::regex_match(m["bundle_id"].get<std::string>(), kId) || !m.contains("tables") ||
        !m["tables"].is_array()) {
      throw table::BundleError("bundle " + path + ": its manifest has no valid bundle_id or tables");
    }
    return r;
  } catch (const table::BundleError& e) {
    throw UsageError(e.what());
  }
}

std::string EventCode(const table::BundleReader& r) { return "bundle-" + r.manifest()["bundle_id"].get<std::string>(); }

// Undoes what the import wrote to each table applied so far (last first).
void Restore(const std::vector<table::Spec>& specs, const std::vector<json>& refs, const std::string& code,
             const json& payload, saga::Datasources& pools, Clock& clock) {
  for (size_t i = refs.size(); i-- > 0;) {
    table::StandaloneRunContext ctx(
        code + "#" + std::to_string(i + 1), payload,
        PoolsOf(pools), clock);
    ctx.set_compensation_data(refs[i]);
    table::ChunkTable chunks;
    const json outcome = table::CompensateSync(ctx, specs[i], chunks);
    spdlog::warn("BUNDLE_IMPORT_RESTORED code={} table={} outcome={}", code, specs[i].table, outcome.dump());
  }
}

int RunImport(const Invocation& inv) {
  if (inv.args.size() != 2) throw UsageError("bundle import takes one FILE");
  Settings s = ResolveSettings(inv);
  SetupLogging(inv.Get("log-level").value_or("warn"), "bundle");
  const std::string path = inv.args[1];
  table::BundleReader reader = OpenBundle(path, Key(s));
  const json manifest = reader.manifest();
  const std::string code = EventCode(reader);
  const std::string target = inv.Get("target").value_or("");
  std::vector<table::Spec> specs;
  try {
    for (const json& t : manifest["tables"]) specs.push_back(table::BundleSpec(t, target));
  } catch (const table::BundleError& e) {
    throw UsageError("bundle " + path + ": " + e.what());
  }
  for (const table::Spec& spec : specs) {
    if (!s.datasources.count(spec.target)) {
      throw UsageError("bundle " + path + ": its target '" + spec.target +
                       "' is not a datasource of this config (--target NAME names another)");
    }
  }
  auto pool = OpenDatabase(s);
  const json payload = manifest.value("payload", json::object());
  saga::Datasources pools(s.datasources);
  SystemClock clock;
  const std::string lock_name = "dsync.bundle." + manifest["bundle_id"].get<std::string>();
  return pool->Run("bundle import", [&](storage::Connection& lock) -> int {
    if (lock.QueryInt("SELECT GET_LOCK(?, 0)", lock_name).value_or(0) != 1) {
      throw Error("bundle " + path + " is being imported by another process (event " + code + ")");
    }
    struct Release {  // however the import ends; a killed process's lock goes with its session
      storage::Connection& c;
      const std::string& name;
      ~Release() {
        try {
          c.QueryInt("SELECT RELEASE_LOCK(?)", name);
        } catch (const std::exception&) {
          c.mark_broken();
        }
      }
    } release{lock, lock_name};
    const std::string status = events::StatusOfEvent(lock, code);
    if (!status.empty()) {
      throw UsageError("bundle " + path + " was imported before (event " + code + ", " + status +
                       "): refused as a replay, nothing applied");
    }
    std::vector<json> refs;
    json outputs = json::array();
    try {
      for (size_t i = 0; i < specs.size(); ++i) {
        table::StandaloneRunContext ctx(
            code + "#" + std::to_string(i + 1), payload,
            PoolsOf(pools), clock);
        // What a failure in this table restores: the chunks it committed so far.
        refs.push_back({{"format", 2}, {"undo", "dsync_sync_chunk"}, {"target", specs[i].target},
                        {"table", specs[i].table}, {"step_code", ctx.step_code()}, {"chunks", 0}});
        table::BundleApplied a = table::ImportBundleTable(ctx, specs[i], reader, manifest["tables"][i]);
        refs.back() = a.compensation;
        outputs.push_back(a.output);
      }
    } catch (const std::exception& e) {
      const bool input = dynamic_cast<const table::BundleError*>(&e) || dynamic_cast<const table::PermanentError*>(&e);
      spdlog::error("BUNDLE_IMPORT_FAILED code={} file={} err={}", code, path, e.what());
      Restore(specs, refs, code, payload, pools, clock);
      const std::string why = "bundle " + path + ": " + e.what() + " (what the import wrote was restored)";
      if (input) throw UsageError(why);
      throw Error(why);
    }
    events::NewEventRow row;
    row.tenant_id = kBundleTenant;
    row.code = code;
    row.data_id = manifest["bundle_id"].get<std::string>();
    row.topic = kBundleEventTopic;
    row.payload = json{{"bundle_id", manifest["bundle_id"]}, {"file", path}, {"created", manifest.value("created", "")},
                       {"source_topic", manifest.value("topic", "")}, {"payload", payload}}.dump();
    row.service = s.service;
    std::vector<events::NewStep> steps;
    for (size_t i = 0; i < specs.size(); ++i) {
      steps.push_back({.code = code + "#" + std::to_string(i + 1), .job_code = code, .tenant_id = kBundleTenant,
                       .sort = static_cast<int>(i), .type = "table_sync", .name = specs[i].step,
                       .payload = manifest["tables"][i]["step"].dump(), .succeeded = true,
                       .output = outputs[i].dump(), .compensation = refs[i].dump()});
    }
    const json result = {{"tables", outputs}};
    storage::Transaction tx(lock, "record bundle import");
    tx.Begin();
    const bool recorded = events::RecordFinishedEvent(lock, row, steps, result.dump(), "cli:bundle-import");
    tx.Commit();
    if (!recorded) throw Error("bundle " + path + ": event " + code + " appeared during the import");
    spdlog::info("BUNDLE_IMPORTED code={} file={} tables={}", code, path, specs.size());
    if (inv.Flag("json")) {
      std::cout << json{{"event", code}, {"bundle_id", manifest["bundle_id"]}, {"tables", outputs}}.dump(2) << "\n";
    } else {
      std::cout << "bundle " << manifest["bundle_id"].get<std::string>() << " imported as event " << code << "\n";
      for (size_t i = 0; i < specs.size(); ++i) {
        const json& o = outputs[i];
        std::cout << "  " << specs[i].table << " -> " << specs[i].target << ": " << o.value("inserted", 0)
                  << " inserted, " << o.value("updated", 0) << " updated, " << o.value("deleted", 0) << " deleted, "
                  << o.value("chunks_equal", 0) << " of " << o.value("chunks", 0) << " chunk(s) already equal\n";
      }
    }
    return 0;
  });
}

}  // namespace

CommandSpec BundleCommandSpec() {
  return {"bundle",
          "carry a sync as a signed file: export the rows a topic's table_sync steps select; import a bundle "
          "file on the other side (once, with undo)",
          "export | import FILE", 1, 2,
          {{"out", true, "export: the file to write"},
           {"topic", true, "export: every table_sync step of this topic (with --payload)"},
           {"payload", true, "export: JSON object the steps' filters read (default {})"},
           {"source", true, "export, one table: the source datasource"},
           {"target", true, "export, one table: the target datasource; import: the datasource to apply to "
                            "(default: the bundle's)"},
           {"table", true, "export, one table: its name"},
           {"where", true, "export, one table: the filter (table_sync's grammar; default every row)"},
           {"params", true, "export, one table: JSON object of the where's :name values"},
           kJsonOption}};
}

int RunBundle(const Invocation& inv) {
  const std::string what = inv.args.empty() ? "" : inv.args[0];
  if (what == "export") {
    if (inv.args.size() != 1) throw UsageError("bundle export takes no FILE argument: give --out FILE");
    return RunExport(inv);
  }
  if (what == "import") {
    for (const char* k : {"out", "topic", "payload", "source", "table", "where", "params"}) {
      if (inv.Get(k)) throw UsageError(std::string("--") + k + " goes with bundle export");
    }
    return RunImport(inv);
  }
  throw UsageError("bundle needs export or import (dsync bundle --help)");
}

int RunVerifyBundle(const Invocation& inv) {
  for (const char* k : {"topic", "payload", "source", "table", "where", "params", "repair", "plan"}) {
    if (inv.Get(k)) throw UsageError(std::string("--") + k + " does not go with --bundle (the bundle names them)");
  }
  Settings s = ResolveSettings(inv);
  SetupLogging(inv.Get("log-level").value_or("warn"), "verify");
  const std::string path = *inv.Get("bundle");
  table::BundleReader reader = OpenBundle(path, Key(s));
  const json& manifest = reader.manifest();
  const std::string target = inv.Get("target").value_or("");
  saga::Datasources pools(s.datasources);
  SystemClock clock;
  json tables = json::array();
  bool equal = true;
  for (const json& t : manifest["tables"]) {
    table::Spec spec;
    try {
      spec = table::BundleSpec(t, target);
    } catch (const table::BundleError& e) {
      throw UsageError("bundle " + path + ": " + e.what());
    }
    if (!s.datasources.count(spec.target)) {
      throw UsageError("bundle " + path + ": its target '" + spec.target + "' is not a datasource of this config");
    }
    table::StandaloneRunContext ctx(
        "bundle-verify", manifest.value("payload", json::object()),
        PoolsOf(pools), clock);
    table::BundleCheck c;
    try {
      c = table::VerifyBundleTable(ctx, spec, t);
    } catch (const table::PermanentError& e) {
      throw UsageError(e.what());
    } catch (const table::BundleError& e) {
      throw UsageError("bundle " + path + ": " + e.what());
    }
    equal = equal && c.chunks_differing == 0;
    tables.push_back(c.ToJson());
  }
  if (inv.Flag("json")) {
    std::cout << json{{"equal", equal}, {"bundle_id", manifest["bundle_id"]}, {"tables", tables}}.dump(2) << "\n";
  } else {
    for (const json& t : tables) {
      std::cout << t["table"].get<std::string>() << " -> " << t["target"].get<std::string>() << ": bundle "
                << t["bundle_rows"] << " row(s), target " << t["target_rows"] << "; " << t["chunks_differing"]
                << " of " << t["chunks"] << " chunk(s) differ\n";
    }
    std::cout << (equal ? "equal to the bundle" : "DIFFERENT from the bundle") << "\n";
  }
  return equal ? 0 : kBundleExitDifferent;
}

}  // namespace dsync::app
