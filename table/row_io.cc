#include "table/row_io.h"

#include <algorithm>

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::Connection;

// The server refuses statements with more than 65535 placeholders.
constexpr size_t kMaxParamsPerStatement = 60000;

size_t RowsPerStatement(size_t params_per_row, int chunk_size) {
  size_t cap = std::max<size_t>(1, kMaxParamsPerStatement / std::max<size_t>(1, params_per_row));
  return std::min(cap, static_cast<size_t>(chunk_size));
}

// Rows per statement as a power of four (at most `cap`): full statements of that
// size, the last ones padded or split (PaddedCount, NextWriteBatch), so a
// connection prepares few texts.
size_t StatementRows(size_t cap) {
  size_t p = 1;
  while (p * 4 <= cap) p *= 4;
  return p;
}

// About this many bytes of values per multi-row statement (well below the default
// max_allowed_packet of 16 MiB even after padding).
constexpr size_t kStatementBytes = 1 << 20;

// `keys` in batches of one statement each: calls batch(padded, params) with `padded`
// keys to match (key.MatchKeys(padded)), the last repeated up to PaddedCount, and
// `params` = `lead` then their values.
template <class F>
void ForKeyBatches(const ColumnSet& key, const std::vector<Row>& keys, int chunk_size,
                   const std::vector<SqlValue>& lead, F&& batch) {
  const size_t per = StatementRows(RowsPerStatement(key.size(), chunk_size));
  for (size_t begin = 0; begin < keys.size(); begin += per) {
    size_t n = std::min(per, keys.size() - begin);
    size_t padded = PaddedCount(n, per);
    std::vector<SqlValue> params = lead;
    for (size_t i = 0; i < padded; ++i) key.AppendKeyValues(keys[begin + std::min(i, n - 1)], params);
    batch(padded, params);
  }
}

}  // namespace

std::vector<int> Positions(const ColumnSet& in, const std::vector<std::string>& names) {
  std::vector<int> out;
  for (const std::string& n : names) out.push_back(in.IndexOf(n));
  return out;
}

size_t CellBytes(const Row& row) {
  size_t n = 0;
  for (const Cell& c : row) n += c ? c->size() : 1;
  return n;
}

size_t RowBytes(const std::vector<Row>& rows) {
  size_t n = 0;
  for (const Row& r : rows) n += CellBytes(r);
  return n;
}

// SELECT cols FROM table WHERE [(filter) AND] key IN (keys) [FOR UPDATE], in batches.
std::vector<Row> ReadByKeys(Connection& c, const std::string& table, const ColumnSet& cols, const ColumnSet& key,
                            const std::vector<Row>& keys, int chunk_size, bool for_update,
                            const BoundFilter* filter) {
  std::vector<Row> out;
  const std::vector<SqlValue> lead = filter != nullptr ? filter->params : std::vector<SqlValue>();
  ForKeyBatches(key, keys, chunk_size, lead, [&](size_t padded, const std::vector<SqlValue>& params) {
    std::string sql = "SELECT " + cols.SelectList() + " FROM " + QuoteIdentifier(table) + " WHERE " +
                      (filter != nullptr ? "(" + filter->sql + ") AND (" : "(") + key.MatchKeys(padded) + ")" +
                      (for_update ? " FOR UPDATE" : "");
    auto rs = c.Query(sql, Bind(params));
    for (Row& r : cols.ReadAll(*rs)) out.push_back(std::move(r));
  });
  return out;
}

// The row hash (ColumnSet::RowHashExpr over `cols`) of each row of `table` whose key
// is among `keys`, by EncodeKey of the key as the table stores it, in batches:
//   SELECT <key>, <row hash> FROM table WHERE key IN (keys) [FOR UPDATE]
std::unordered_map<std::string, uint32_t> HashesByKeys(Connection& c, const std::string& table, const ColumnSet& cols,
                                                       const ColumnSet& key, const std::vector<Row>& keys,
                                                       int chunk_size, bool for_update) {
  std::unordered_map<std::string, uint32_t> out;
  const std::string head =
      "SELECT " + key.SelectList() + ", " + cols.RowHashExpr() + " FROM " + QuoteIdentifier(table) + " WHERE ";
  ForKeyBatches(key, keys, chunk_size, {}, [&](size_t padded, const std::vector<SqlValue>& params) {
    auto rs = c.Query(head + key.MatchKeys(padded) + (for_update ? " FOR UPDATE" : ""), Bind(params));
    while (rs->next()) {
      KeyHash kh = ReadKeyHash(*rs, key);
      out[EncodeKey(kh.key)] = kh.hash;
    }
  });
  return out;
}

// The keys of a before-image's entries: its restore rows' keys, then its remove keys.
std::vector<Row> EntryKeys(const Image& image, const std::vector<int>& key_pos) {
  std::vector<Row> keys;
  keys.reserve(image.restore.size() + image.remove.size());
  for (const Row& r : image.restore) keys.push_back(Project(r, key_pos));
  for (const Row& k : image.remove) keys.push_back(k);
  return keys;
}

// The after-image hashes of a chunk (conflict-safe compensation): for each entry of
// `image` (EntryKeys order), the row hash over the image's columns of the target row
// with that key as it is now, or null where there is none. Recorded as the chunk
// commits, and compared with the same read when it is compensated.
// `span`: a DenseSpan holding every entry's key, read whole instead of key by key.
json AfterState(Connection& c, const std::string& table, const ColumnSet& cols, const ColumnSet& key,
                const std::vector<int>& key_pos, const Image& image, int chunk_size, bool for_update,
                const std::optional<KeySpan>& span) {
  const std::vector<Row> keys = EntryKeys(image, key_pos);
  const auto hashes = span && !for_update ? HashesInSpan(c, table, cols, key, *span)
                                          : HashesByKeys(c, table, cols, key, keys, chunk_size, for_update);
  json out = json::array();
  for (const Row& k : keys) {
    auto it = hashes.find(EncodeKey(k));
    if (it == hashes.end()) out.push_back(nullptr);
    else out.push_back(it->second);
  }
  return out;
}
// Multi-row INSERT ... ON DUPLICATE KEY UPDATE of `rows`, or with `insert_only` a plain INSERT
// (rows whose keys the target does not hold: a duplicate key is then an error, not
// an update of whichever row holds it). Statements of a power of four rows; upserts
// pad the last one with repeats of its last row (NextWriteBatch), inserts cannot.
void Upsert(Connection& c, const std::string& table, const ColumnSet& cols, const std::vector<const Row*>& rows,
            int chunk_size, bool insert_only) {
  if (rows.empty()) return;
  std::string update;
  for (const std::string& n : cols.names()) {
    update += (update.empty() ? "" : ", ") + QuoteIdentifier(n) + " = VALUES(" + QuoteIdentifier(n) + ")";
  }
  size_t bytes = 0;
  for (const Row* r : rows) bytes += CellBytes(*r);
  const size_t avg = std::max<size_t>(1, bytes / rows.size());
  const size_t per = StatementRows(
      std::min(RowsPerStatement(cols.size(), chunk_size), std::max<size_t>(1, kStatementBytes / avg)));
  const std::string tuple = cols.ValuesTuple();
  for (size_t begin = 0, n = 0; begin < rows.size(); begin += n) {
    const WriteBatch batch = NextWriteBatch(rows.size() - begin, per, /*may_pad=*/!insert_only);
    n = batch.rows;
    const size_t padded = batch.padded;
    std::vector<SqlValue> params;
    params.reserve(padded * cols.size());
    std::string sql = "INSERT INTO " + QuoteIdentifier(table) + " (" + cols.NameList() + ") VALUES ";
    for (size_t i = 0; i < padded; ++i) {
      sql += (i > 0 ? ", " : "") + tuple;
      cols.AppendValues(*rows[begin + std::min(i, n - 1)], params);
    }
    if (!insert_only) sql += " ON DUPLICATE KEY UPDATE " + update;
    c.Execute(sql, Bind(params));
  }
}

void DeleteKeys(Connection& c, const std::string& table, const ColumnSet& key, const std::vector<Row>& keys,
                int chunk_size) {
  ForKeyBatches(key, keys, chunk_size, {}, [&](size_t padded, const std::vector<SqlValue>& params) {
    c.Execute("DELETE FROM " + QuoteIdentifier(table) + " WHERE " + key.MatchKeys(padded), Bind(params));
  });
}

}  // namespace dsync::table
