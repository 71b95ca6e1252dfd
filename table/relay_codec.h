// The byte form of a chunk of rows on its way from a source to a target that no single
// host reaches both of: a relayed table_sync chunk in the framework database (a BLOB
// of the relay table) and a section of a bundle file (table/bundle_file.h) use it.
//
//   table::RelayChunk chunk{.columns = {"id", "title"}, .key_columns = {"id"},
//                           .lo = Row{"100"}, .hi = Row{"200"}, .rows = rows};
//   std::string bytes = table::EncodeRelayChunk(chunk);
//   table::RelayChunk back = table::DecodeRelayChunk(bytes);   // == chunk
//
// Cells are the table steps' exact text encoding (table/sql.h: a text or NULL, exact
// for every column type), so a row decoded on the target binds exactly as a row read
// there would. Layout (little-endian; varint = LEB128, at most 10 bytes):
//   "DSRC" u8 version(1)
//   varint n, n names      columns, then key_columns (each varint length + bytes)
//   u8 flags               bit 0: lo present, bit 1: hi present
//   [lo cells] [hi cells]  one cell per key column
//   varint n, n rows       one cell per column each
//   varint n, n keys       the deletes, one cell per key column each
//   u32 CRC-32 of every byte before it
// A cell is u8 0 (NULL) or u8 1, varint length, bytes.
//
// Decoding refuses anything else with a RelayFormatError of one line naming the fault
// ("relay chunk: checksum mismatch ...", "... truncated at byte 1234", "... row 3 has 2
// cells, expected 3"); no count is trusted beyond the bytes that remain, so hostile
// input cannot make it allocate more than its own size.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "table/sql.h"

namespace dsync::table {

class RelayFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RelayChunk {
  std::vector<std::string> columns;      // what each row's cells are, in order
  std::vector<std::string> key_columns;  // what lo, hi and each delete's cells are
  std::optional<Row> lo;                 // the key range (lo, hi] the chunk covers;
  std::optional<Row> hi;                 // nullopt: open at that end
  std::vector<Row> rows;                 // rows to write (upsert) in the target
  std::vector<Row> deletes;              // keys to delete in the target

  bool operator==(const RelayChunk&) const = default;
};

inline constexpr uint8_t kRelayChunkVersion = 1;

// REQUIRES: every row has columns.size() cells; lo, hi and every delete
// key_columns.size() (std::invalid_argument otherwise: a caller's bug).
std::string EncodeRelayChunk(const RelayChunk& chunk);
// Throws RelayFormatError.
RelayChunk DecodeRelayChunk(std::string_view bytes);

// CRC-32 (ISO-HDLC, zlib's) of `bytes`, continuing from `crc` (0 for a fresh one).
uint32_t Crc32(std::string_view bytes, uint32_t crc = 0);

}  // namespace dsync::table
