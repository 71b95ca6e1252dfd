// Just enough of the binlog's row format to get the primary-key values of each row a
// ROWS event changed (docs/capture.md "Reading the binlog"). The rest of each row is
// skipped, never decoded: at apply time the row is re-read from the source by its key.
//
// A TABLE_MAP event gives each column's type byte and metadata (MySQL's and MariaDB's
// log_event format); a ROWS event gives, per row, a null bitmap over its present
// columns and their values packed one after another. Skipping a column needs its
// packed length, which follows from its type, its metadata and, for variable-length
// types, a length prefix (calc_field_size in the server). libmariadb's own
// mariadb_rpl_extract_rows misreads CHAR, ENUM and SET columns (Connector/C 3.3: it
// takes their length from the next column's metadata), so it is not used.
//
// Key columns may be integers (signed or unsigned, any width) or character strings
// (CHAR, VARCHAR, TEXT); KeyColumnProblem says why another key cannot be captured.
//
// Thread safety: pure functions over value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsync::capture {

// The row data could not be decoded (truncated, a type it does not know).
class RowFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One column as the TABLE_MAP event describes it.
struct MappedColumn {
  uint8_t type = 0;     // enum_field_types as written (MYSQL_TYPE_STRING also for ENUM/SET/CHAR)
  uint16_t meta = 0;    // its metadata, as the server packs it (see row_image.cc)
};

// The columns of a TABLE_MAP event from its column-type bytes and metadata block.
// Throws RowFormatError when the metadata is shorter than the types need.
std::vector<MappedColumn> ParseColumns(std::string_view types, std::string_view metadata);

// How a key column's value is turned into JSON.
struct KeyColumn {
  size_t index = 0;         // position among the table's columns (0-based, binlog order)
  bool is_unsigned = false; // an integer column declared UNSIGNED
  std::string name;         // for messages
};

enum class RowsKind { kWrite, kUpdate, kDelete };

// The keys of the rows of one ROWS event, in order, as JSON arrays of the key columns'
// values (an integer column as a JSON integer, a character column as a string). An
// UPDATE gives each row's key before and then after the change (two entries: a key
// change touches two keys). `present` and `present_after` are the event's column
// bitmaps (present_after: UPDATE only). Throws RowFormatError.
std::vector<nlohmann::json> RowKeys(const std::vector<MappedColumn>& columns, const std::vector<KeyColumn>& key,
                                    RowsKind kind, const uint8_t* present, const uint8_t* present_after,
                                    const uint8_t* data, size_t size);

// "" when a column of information_schema DATA_TYPE `data_type` can be a captured key
// column, else why not ("a datetime key cannot be captured: ...").
std::string KeyColumnProblem(const std::string& data_type);

}  // namespace dsync::capture
