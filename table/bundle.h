// Bundles (docs/relay.md "Bundles"): a sync carried as a file, for links between
// environments that pass only files. `dsync bundle export` writes the rows a topic's
// table_sync steps would move (every row their filters select) into one signed file
// (table/bundle_file.h); `dsync bundle import FILE` applies it on the other side through
// the same target writer as a direct or relayed sync (table/writer_target.h: one target
// transaction per chunk with its before-image, undo record and checkpoint), so the
// import has the same exact undo; `dsync verify --bundle FILE` compares a target with
// the manifest's range checksums alone.
//
//   // side A (reaches the source):
//   nlohmann::json manifest = table::ExportBundle(ctx, request, "/out/x.dsb", key);
//   // side B (reaches the target):
//   table::BundleReader r = table::BundleReader::Open("/in/x.dsb", key);   // verified first
//   for (const json& t : r.manifest()["tables"]) {
//     table::Spec spec = table::BundleSpec(t, "");
//     table::BundleApplied a = table::ImportBundleTable(ctx, spec, r, t);   // ctx.step_code(): the undo's name
//   }
//
// The file: one section per chunk (a relay chunk, table/relay_codec.h: the rows of the
// key range (lo, hi], in key order; the first chunk of a table open below, the last open
// above), and a manifest:
//   {"bundle_id", "created", "topic", "payload", "source_datasource", "tables": [
//     {"step": {"name", "type", ...the step's config}, "source", "target", "table",
//      "schema": the source's description (table/relay_schema.h), "schema_fingerprint",
//      "rows", "first_section", "chunks": [{"lo", "hi", "rows", "checksum"}]}]}
// A table is read in one consistent snapshot of the source (one REPEATABLE READ
// transaction, as mysqldump --single-transaction), so each chunk's checksum is that of
// its rows.
//
// The import, per chunk: the target's checksum of (lo, hi] equal to the manifest's ->
// nothing to write (a checkpoint); else the chunk's rows are upserted where they differ
// and, with the step's delete_missing, the target's rows of the range the chunk lacks
// are deleted. Re-importing after a crash therefore skips what is already applied.
// Schema: the target is checked against the bundle's source description with the same
// preflight a relayed sync runs (table/planner.h); columns the target lacks are left
// out as table_sync leaves them out.
//
// Thread safety: one call at a time per reader; contexts as table/run_context.h.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/settings.h"
#include "table/bundle_file.h"
#include "table/run_context.h"
#include "table/spec.h"

namespace dsync::table {

struct BundleExportRequest {
  std::string topic;               // recorded in the manifest ("" for one table)
  nlohmann::json payload = nlohmann::json::object();  // binds the steps' filters
  std::vector<StepSpec> steps;     // the table_sync steps, in plan order
};

// Writes the bundle to `path` (through path + ".part"). Returns its manifest. ctx: the
// sources' pools and the stop token. Throws PermanentError (a missing table or column,
// a filter that does not bind), BundleError (the file), Interrupted, DbError.
nlohmann::json ExportBundle(RunContext& ctx, const BundleExportRequest& request, const std::string& path,
                            const std::string& key);

// The spec of a manifest table's step, its target `target` when not empty. Throws
// BundleError (a manifest table without a valid step).
Spec BundleSpec(const nlohmann::json& table, const std::string& target);

struct BundleApplied {
  nlohmann::json output;        // as table_sync's output, plus "bundle_chunks"
  nlohmann::json compensation;  // table_sync's compensation reference (CompensateSync)
};

// Applies the manifest table `table` of `reader` to spec.target under ctx.step_code()
// (its undo and checkpoints). Throws PermanentError (the schemas disagree, a value the
// target refuses), BundleError (a section does not match its manifest entry),
// Interrupted, DbError.
BundleApplied ImportBundleTable(RunContext& ctx, const Spec& spec, BundleReader& reader, const nlohmann::json& table);

struct BundleCheck {
  std::string table, target;
  int64_t bundle_rows = 0, target_rows = 0;
  int64_t chunks = 0, chunks_differing = 0;
  std::vector<nlohmann::json> differing;  // the differing chunks' {"lo", "hi"} (at most 100)
  nlohmann::json ToJson() const;
};

// Compares spec.target with the manifest table's chunk checksums (the bundle's rows are
// not read). Throws PermanentError (no such table, the schemas disagree), DbError.
BundleCheck VerifyBundleTable(RunContext& ctx, const Spec& spec, const nlohmann::json& table);

}  // namespace dsync::table
