// Statements over rows named by their keys, sized at run time: reads (rows, row
// hashes) and writes (multi-row upserts and inserts, deletes) of many keys, batched so
// that no statement exceeds the server's placeholder limit (65535) or about 1 MiB of
// values, with statement sizes a power of four (padded, table::PaddedCount) so that a
// connection prepares few texts. Used by the source reader, the target writer and
// compensation (table/source_reader.h, table/target_writer.h).
//
// Thread safety: stateless functions; each uses only the connection it is given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/connection.h"
#include "table/chunks.h"
#include "table/sql.h"

namespace dsync::table {

// The position in `in` of each of `names` (-1 where absent).
std::vector<int> Positions(const ColumnSet& in, const std::vector<std::string>& names);

// The bytes of a row's values (a NULL counts 1), and of rows.
size_t CellBytes(const Row& row);
size_t RowBytes(const std::vector<Row>& rows);

// SELECT cols FROM table WHERE [(filter) AND] key IN (keys) [FOR UPDATE], in batches
// of at most `chunk_size` keys.
std::vector<Row> ReadByKeys(storage::Connection& c, const std::string& table, const ColumnSet& cols,
                            const ColumnSet& key, const std::vector<Row>& keys, int chunk_size, bool for_update,
                            const BoundFilter* filter = nullptr);

// The row hash (ColumnSet::RowHashExpr over `cols`) of each row of `table` whose key
// is among `keys`, by EncodeKey of the key as the table stores it, in batches:
//   SELECT <key>, <row hash> FROM table WHERE key IN (keys) [FOR UPDATE]
std::unordered_map<std::string, uint32_t> HashesByKeys(storage::Connection& c, const std::string& table,
                                                       const ColumnSet& cols, const ColumnSet& key,
                                                       const std::vector<Row>& keys, int chunk_size, bool for_update);

// The keys of a before-image's entries: its restore rows' keys, then its remove keys.
std::vector<Row> EntryKeys(const Image& image, const std::vector<int>& key_pos);

// The after-image hashes of a chunk (conflict-safe compensation): for each entry of
// `image` (EntryKeys order), the row hash over the image's columns of the target row
// with that key as it is now, or null where there is none. Recorded as the chunk
// commits, and compared with the same read when it is compensated.
// `span`: a DenseSpan holding every entry's key, read whole instead of key by key.
nlohmann::json AfterState(storage::Connection& c, const std::string& table, const ColumnSet& cols,
                          const ColumnSet& key, const std::vector<int>& key_pos, const Image& image, int chunk_size,
                          bool for_update, const std::optional<KeySpan>& span = std::nullopt);

// Multi-row INSERT ... ON DUPLICATE KEY UPDATE of `rows`, or with `insert_only` a plain
// INSERT (rows whose keys the target does not hold: a duplicate key is then an error,
// not an update of whichever row holds it). Statements of a power of four rows; upserts
// pad the last one with repeats of its last row (NextWriteBatch), inserts cannot.
void Upsert(storage::Connection& c, const std::string& table, const ColumnSet& cols,
            const std::vector<const Row*>& rows, int chunk_size, bool insert_only = false);

// DELETE FROM table WHERE key IN (keys), in batches.
void DeleteKeys(storage::Connection& c, const std::string& table, const ColumnSet& key, const std::vector<Row>& keys,
                int chunk_size);

}  // namespace dsync::table
