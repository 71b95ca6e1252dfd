#include "table/relay_codec.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace dsync::table {
namespace {

constexpr std::string_view kMagic = "DSRC";

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

class Writer {
 public:
  void Byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      Byte(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    Byte(static_cast<uint8_t>(v));
  }
  void Bytes(std::string_view s) {
    Varint(s.size());
    out_.append(s);
  }
  void Cells(const Row& row, size_t expected, const char* what) {
    if (row.size() != expected) {
      throw std::invalid_argument(std::string("relay chunk: ") + what + " has " + std::to_string(row.size()) +
                                  " cells, expected " + std::to_string(expected));
    }
    for (const Cell& c : row) {
      if (!c) {
        Byte(0);
      } else {
        Byte(1);
        Bytes(*c);
      }
    }
  }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  uint8_t Byte() {
    Need(1);
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = Byte();
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    Fail("a length longer than 10 bytes");
  }
  // A count of items each at least `min_bytes` long: never more than the bytes left.
  size_t Count(size_t min_bytes, const char* what) {
    const uint64_t n = Varint();
    if (n > (in_.size() - pos_) / std::max<size_t>(1, min_bytes)) {
      Fail(std::string(what) + " count " + std::to_string(n) + " exceeds the bytes that remain");
    }
    return static_cast<size_t>(n);
  }
  std::string Bytes() {
    const uint64_t n = Varint();
    Need(n);
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  Row Cells(size_t n) {
    Row row;
    row.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t tag = Byte();
      if (tag == 0) {
        row.emplace_back(std::nullopt);
      } else if (tag == 1) {
        row.emplace_back(Bytes());
      } else {
        Fail("cell tag " + std::to_string(tag));
      }
    }
    return row;
  }
  size_t pos() const { return pos_; }
  bool done() const { return pos_ == in_.size(); }

  [[noreturn]] void Fail(const std::string& what) const {
    throw RelayFormatError("relay chunk: " + what + " at byte " + std::to_string(pos_));
  }

 private:
  void Need(uint64_t n) const {
    if (n > in_.size() - pos_) {
      throw RelayFormatError("relay chunk: truncated at byte " + std::to_string(pos_) + " (needs " +
                             std::to_string(n) + " more, " + std::to_string(in_.size() - pos_) + " left)");
    }
  }

  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace

uint32_t Crc32(std::string_view bytes, uint32_t crc) {
  uint32_t c = ~crc;
  for (unsigned char b : bytes) c = kCrcTable[(c ^ b) & 0xff] ^ (c >> 8);
  return ~c;
}

std::string EncodeRelayChunk(const RelayChunk& chunk) {
  Writer w;
  w.out().append(kMagic);
  w.Byte(kRelayChunkVersion);
  w.Varint(chunk.columns.size());
  for (const std::string& n : chunk.columns) w.Bytes(n);
  w.Varint(chunk.key_columns.size());
  for (const std::string& n : chunk.key_columns) w.Bytes(n);
  w.Byte(static_cast<uint8_t>((chunk.lo ? 1 : 0) | (chunk.hi ? 2 : 0)));
  if (chunk.lo) w.Cells(*chunk.lo, chunk.key_columns.size(), "lo");
  if (chunk.hi) w.Cells(*chunk.hi, chunk.key_columns.size(), "hi");
  w.Varint(chunk.rows.size());
  for (const Row& r : chunk.rows) w.Cells(r, chunk.columns.size(), "a row");
  w.Varint(chunk.deletes.size());
  for (const Row& k : chunk.deletes) w.Cells(k, chunk.key_columns.size(), "a delete");
  w.U32(Crc32(w.out()));
  return std::move(w.out());
}

RelayChunk DecodeRelayChunk(std::string_view bytes) {
  if (bytes.size() < kMagic.size() + 1 + 4 || bytes.substr(0, kMagic.size()) != kMagic) {
    throw RelayFormatError("relay chunk: not a relay chunk (" + std::to_string(bytes.size()) +
                           " bytes without its header)");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - 4);
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) stored |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[body.size() + i])) << (8 * i);
  const uint32_t computed = Crc32(body);
  if (stored != computed) {
    throw RelayFormatError("relay chunk: checksum mismatch (stored " + std::to_string(stored) + ", computed " +
                           std::to_string(computed) + "): altered or truncated");
  }
  Reader r(body.substr(kMagic.size()));
  const uint8_t version = r.Byte();
  if (version != kRelayChunkVersion) r.Fail("unknown format version " + std::to_string(version));
  RelayChunk chunk;
  const size_t ncols = r.Count(1, "column");
  for (size_t i = 0; i < ncols; ++i) chunk.columns.push_back(r.Bytes());
  const size_t nkeys = r.Count(1, "key column");
  for (size_t i = 0; i < nkeys; ++i) chunk.key_columns.push_back(r.Bytes());
  if (chunk.columns.empty() || chunk.key_columns.empty()) r.Fail("no columns or no key columns");
  const uint8_t flags = r.Byte();
  if (flags & ~3u) r.Fail("unknown flags " + std::to_string(flags));
  if (flags & 1) chunk.lo = r.Cells(nkeys);
  if (flags & 2) chunk.hi = r.Cells(nkeys);
  const size_t nrows = r.Count(ncols, "row");
  chunk.rows.reserve(nrows);
  for (size_t i = 0; i < nrows; ++i) chunk.rows.push_back(r.Cells(ncols));
  const size_t ndel = r.Count(nkeys, "delete");
  chunk.deletes.reserve(ndel);
  for (size_t i = 0; i < ndel; ++i) chunk.deletes.push_back(r.Cells(nkeys));
  if (!r.done()) r.Fail("unexpected bytes after the deletes");
  return chunk;
}

}  // namespace dsync::table
