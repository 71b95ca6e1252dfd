// The planner of a table_sync run: which columns it syncs and how each side hashes
// them (Plan), whether the two tables agree on them (schema preflight), where earlier
// runs stopped (Resume), and which key ranges are worked at once (lanes). The lane
// loop (table/sync.h) then takes each lane's ranges a chunk at a time.
//
// Schema preflight (before the first write): source and target must agree on each
// synced column's COLUMN_TYPE, nullability and collation, and on the primary key
// (columns in order), else a permanent failure naming the column ("schema preflight of
// step 'docs': column `title` is varchar(200) NULL COLLATE ... in env_a.kb_doc but
// varchar(100) NULL ... in env_b.kb_doc"). The target's shape over the before-image
// columns and its fingerprint are kept in the compensation data ("schema",
// "schema_fingerprint"; the output has the fingerprint), so a refused compensation can
// say how the table changed since (table/preflight.h).
//
// Lanes. A table whose primary key is one integer column is split, at the step's first
// run, into up to `lanes` key ranges of equal key spans, from the source's lowest and
// highest key (unfiltered): (-inf, s1], (s1, s2], ..., (s_last, +inf). Each lane is a
// loop of chunks on its own thread, with its own source reads, target transaction and
// checkpoint, so the target's INSERT path (about one core per connection on narrow
// rows) is used by several connections at once. Lanes span at least 20,000 keys (and 4
// chunk_size): a smaller table, `lanes` 1, or a key of other types has one lane. The
// split keys are kept in row 0's hi_key (a JSON array of keys; NULL: one lane), so a
// run that resumes works the same ranges; a chunk record belongs to the lane its
// hi_key falls in, and a lane resumes after its newest record.
//
// Thread safety: stateless functions; a Plan is read-only once the run starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "storage/connection.h"
#include "storage/connection_pool.h"
#include "table/chunks.h"
#include "table/preflight.h"
#include "table/spec.h"
#include "table/sql.h"

namespace dsync::table {

// Column sets of one run; positions index rows read through them.
struct Plan {
  ColumnSet src_cols;        // synced columns, read from the source
  ColumnSet src_key;
  ColumnSet tgt_cols;        // synced columns, written to the target
  ColumnSet tgt_key;
  ColumnSet tgt_image;       // every writable target column: the before-image
  std::vector<int> sync_key_pos;   // key within synced columns
  std::vector<int> image_key_pos;  // key within image columns
  std::vector<int> sync_in_image;  // each synced column within image columns
  std::vector<std::string> not_in_target;  // source columns not synced: the target lacks them
};

// The synced columns (`columns`, or every column both tables have) and the key, checked
// on both schemas. Throws PermanentError naming what is missing or differs.
Plan MakePlan(const Spec& spec, const TableSchema& s, const TableSchema& t);

// Schema preflight over the shapes each side read (table::ReadShape: the source's over
// plan.src_cols, the target's over plan.tgt_image): the synced columns and the primary
// key agree, else PermanentError naming the column. Returns the target's shape over the
// before-image columns, kept with the step. Sets the synced columns' row hashes plain
// (no CAST per column) when both sides allow it, and in their compare form
// (ColumnSet::set_compare_hash).
TableShape Preflight(const Spec& spec, Plan& plan, const TableSchema& s, const TableSchema& t,
                     const TableShape& source, const TableShape& target);

// What earlier runs of the step committed.
struct Resume {
  int last_chunk = 0;             // highest chunk_no (0: none)
  std::optional<Row> checkpoint;  // its hi_key
  bool finished = false;          // its hi_key is the end
  int64_t records = 0;            // chunk records
  int64_t rows_written = 0;
  std::optional<std::string> lanes;  // row 0's split keys (JSON), if recorded
};

// Reads it in the caller's target transaction. After a complete compensation the
// records are forgotten (this forward run starts a new record); a partly compensated
// step is a PermanentError.
Resume ReadResume(storage::Connection& c, const Spec& spec, const std::string& step_code);

// A key range of the step, worked through chunk by chunk on its own thread with its
// own checkpoint.
struct Lane {
  int index = 0;
  std::optional<Row> end;  // inclusive upper end; nullopt: the table's end
  std::optional<Row> lo;   // the checkpoint: the last key done (the lane's start if none)
  bool done = false;
};

// The step's lanes. Their split keys are chosen at the step's first run and kept in
// row 0's hi_key (under the step lock and fence of `attempt`), so a run that resumes
// works the same ranges; a lane's checkpoint is the upper end of its newest chunk
// record. Without recorded splits (a small table, `lanes` 1, a key that is not one
// integer column, or records of an earlier version) there is one lane over the whole
// table. `src_bounds`: the source's lowest and highest key (single integer keys).
std::vector<Lane> PlanLanes(const Spec& spec, storage::ConnectionPool& tgt, int attempt,
                            const std::optional<KeyBounds>& src_bounds, const std::string& step_code,
                            const Resume& resume);

}  // namespace dsync::table
