// Key extraction from binlog row images (capture/row_image.h). The packed sizes follow
// the server's calc_field_size (sql/log_event.cc, rpl_utility.cc of MySQL and MariaDB).
//
// Thread safety: pure functions.
#include "capture/row_image.h"

#include <set>

namespace dsync::capture {
namespace {

using nlohmann::json;

// enum_field_types (mysql_com.h), as written in TABLE_MAP events.
enum : uint8_t {
  kDecimal = 0, kTiny = 1, kShort = 2, kLong = 3, kFloat = 4, kDouble = 5, kNull = 6, kTimestamp = 7,
  kLongLong = 8, kInt24 = 9, kDate = 10, kTime = 11, kDatetime = 12, kYear = 13, kNewDate = 14,
  kVarchar = 15, kBit = 16, kTimestamp2 = 17, kDatetime2 = 18, kTime2 = 19, kJson = 245,
  kNewDecimal = 246, kEnum = 247, kSet = 248, kTinyBlob = 249, kMediumBlob = 250, kLongBlob = 251,
  kBlob = 252, kVarString = 253, kString = 254, kGeometry = 255,
};

bool IsBlob(uint8_t t) {
  return t == kTinyBlob || t == kMediumBlob || t == kLongBlob || t == kBlob || t == kGeometry || t == kJson;
}

// Bytes of metadata a column type has in the TABLE_MAP event.
size_t MetaBytes(uint8_t t) {
  switch (t) {
    case kFloat: case kDouble: case kTimestamp2: case kDatetime2: case kTime2:
      return 1;
    case kVarchar: case kVarString: case kNewDecimal: case kBit: case kString: case kEnum: case kSet:
      return 2;
    default:
      return IsBlob(t) ? 1 : 0;
  }
}

uint64_t LittleEndian(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// decimal_bin_size(precision, scale): a DECIMAL packs 9 digits in 4 bytes.
size_t DecimalBytes(int precision, int scale) {
  static constexpr int kDigitBytes[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
  const int integral = precision - scale;
  if (integral < 0 || scale < 0 || precision > 65) throw RowFormatError("bad DECIMAL metadata");
  return static_cast<size_t>(integral / 9 * 4 + kDigitBytes[integral % 9] + scale / 9 * 4 + kDigitBytes[scale % 9]);
}

// A CHAR/ENUM/SET column's metadata: its real type and its maximum length in bytes
// (the high bits of a length above 255 are folded into the type byte).
struct StringMeta {
  uint8_t real_type;
  uint32_t max_length;
};
StringMeta DecodeStringMeta(uint16_t meta) {
  const uint8_t b0 = static_cast<uint8_t>(meta >> 8);
  const uint8_t b1 = static_cast<uint8_t>(meta & 0xff);
  if ((b0 & 0x30) != 0x30) {
    return {static_cast<uint8_t>(b0 | 0x30), static_cast<uint32_t>(b1 | (((b0 & 0x30) ^ 0x30) << 4))};
  }
  return {b0, b1};
}

// Where a variable-length value's bytes are: after a length prefix of `prefix` bytes.
struct Span {
  size_t total;   // bytes the column takes in the row
  size_t offset;  // where its value starts (after the prefix)
};

Span Prefixed(const uint8_t* p, size_t left, size_t prefix) {
  if (left < prefix) throw RowFormatError("row data truncated");
  const size_t len = static_cast<size_t>(LittleEndian(p, prefix));
  return {prefix + len, prefix};
}

// The packed size of a non-NULL value of `c` at `p` (`left` bytes remain).
Span ValueSpan(const MappedColumn& c, const uint8_t* p, size_t left) {
  const uint16_t m = c.meta;
  switch (c.type) {
    case kTiny: case kYear: return {1, 0};
    case kShort: return {2, 0};
    case kInt24: case kDate: case kNewDate: case kTime: return {3, 0};
    case kLong: case kTimestamp: return {4, 0};
    case kLongLong: case kDatetime: return {8, 0};
    case kNull: return {0, 0};
    case kFloat: case kDouble: return {m, 0};
    case kTimestamp2: return {4 + (m + 1u) / 2, 0};
    case kDatetime2: return {5 + (m + 1u) / 2, 0};
    case kTime2: return {3 + (m + 1u) / 2, 0};
    case kNewDecimal: return {DecimalBytes(m >> 8, m & 0xff), 0};
    case kBit: return {static_cast<size_t>((m >> 8) + ((m & 0xff) > 0 ? 1 : 0)), 0};
    case kEnum: case kSet: return {static_cast<size_t>(m & 0xff), 0};
    case kVarchar: case kVarString: return Prefixed(p, left, m > 255 ? 2 : 1);
    case kString: {
      const StringMeta s = DecodeStringMeta(m);
      if (s.real_type == kEnum || s.real_type == kSet) return {s.max_length & 0xff, 0};
      return Prefixed(p, left, s.max_length > 255 ? 2 : 1);
    }
    default:
      if (IsBlob(c.type)) {
        if (m < 1 || m > 4) throw RowFormatError("bad BLOB metadata");
        return Prefixed(p, left, m);
      }
      throw RowFormatError("column type " + std::to_string(c.type) + " is not supported in row images");
  }
}

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

json KeyValue(const MappedColumn& c, const KeyColumn& k, const uint8_t* p, const Span& span) {
  switch (c.type) {
    case kTiny: case kShort: case kInt24: case kLong: case kLongLong: {
      const size_t n = span.total;
      const uint64_t raw = LittleEndian(p, n);
      if (k.is_unsigned) return json(raw);
      const int shift = static_cast<int>(64 - 8 * n);
      return json(static_cast<int64_t>(raw << shift) >> shift);  // sign-extend
    }
    default: {
      const bool text = c.type == kVarchar || c.type == kVarString || IsBlob(c.type) ||
                        (c.type == kString && DecodeStringMeta(c.meta).real_type == kString);
      if (!text) throw RowFormatError("key column `" + k.name + "` has a type capture cannot read");
      std::string value(reinterpret_cast<const char*>(p + span.offset), span.total - span.offset);
      if (!ValidUtf8(value)) throw RowFormatError("key column `" + k.name + "` holds a value that is not UTF-8");
      return json(std::move(value));
    }
  }
}

bool Bit(const uint8_t* bitmap, size_t i) { return (bitmap[i / 8] >> (i % 8)) & 1; }

// One row image at `data`: returns its key, advances `pos`.
json OneImage(const std::vector<MappedColumn>& columns, const std::vector<KeyColumn>& key, const uint8_t* present,
              const uint8_t* data, size_t size, size_t& pos) {
  size_t present_count = 0;
  for (size_t i = 0; i < columns.size(); ++i) present_count += Bit(present, i) ? 1 : 0;
  const size_t null_bytes = (present_count + 7) / 8;
  if (size - pos < null_bytes) throw RowFormatError("row data truncated");
  const uint8_t* nulls = data + pos;
  pos += null_bytes;
  std::vector<json> values(columns.size());
  std::vector<bool> is_key(columns.size(), false);
  for (const KeyColumn& k : key) {
    if (k.index >= columns.size()) throw RowFormatError("key column `" + k.name + "` is beyond the row's columns");
    is_key[k.index] = true;
  }
  size_t ordinal = 0;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (!Bit(present, i)) continue;
    const bool null = Bit(nulls, ordinal++);
    if (null) continue;
    const Span span = ValueSpan(columns[i], data + pos, size - pos);
    if (span.total > size - pos) throw RowFormatError("row data truncated");
    if (is_key[i]) {
      for (const KeyColumn& k : key) {
        if (k.index == i) values[i] = KeyValue(columns[i], k, data + pos, span);
      }
    }
    pos += span.total;
  }
  json out = json::array();
  for (const KeyColumn& k : key) {
    if (values[k.index].is_null()) {
      throw RowFormatError("key column `" + k.name + "` is missing from the row image (binlog_row_image must be FULL)");
    }
    out.push_back(values[k.index]);
  }
  return out;
}

}  // namespace

std::vector<MappedColumn> ParseColumns(std::string_view types, std::string_view metadata) {
  std::vector<MappedColumn> out;
  out.reserve(types.size());
  size_t m = 0;
  for (char t : types) {
    MappedColumn c;
    c.type = static_cast<uint8_t>(t);
    const size_t n = MetaBytes(c.type);
    if (metadata.size() - m < n) throw RowFormatError("TABLE_MAP metadata truncated");
    const auto* b = reinterpret_cast<const uint8_t*>(metadata.data() + m);
    if (n == 1) {
      c.meta = b[0];
    } else if (n == 2) {
      // VARCHAR: a little-endian length; BIT: bits then bytes; CHAR/ENUM/SET and
      // DECIMAL: the first byte high.
      if (c.type == kVarchar || c.type == kVarString || c.type == kBit) {
        c.meta = static_cast<uint16_t>(b[0] | (b[1] << 8));
      } else {
        c.meta = static_cast<uint16_t>((b[0] << 8) | b[1]);
      }
    }
    m += n;
    out.push_back(c);
  }
  return out;
}

std::vector<json> RowKeys(const std::vector<MappedColumn>& columns, const std::vector<KeyColumn>& key, RowsKind kind,
                          const uint8_t* present, const uint8_t* present_after, const uint8_t* data, size_t size) {
  std::vector<json> keys;
  size_t pos = 0;
  while (pos < size) {
    keys.push_back(OneImage(columns, key, present, data, size, pos));
    if (kind == RowsKind::kUpdate) {
      if (present_after == nullptr) throw RowFormatError("UPDATE event without its after-image bitmap");
      keys.push_back(OneImage(columns, key, present_after, data, size, pos));
    }
  }
  return keys;
}

std::string KeyColumnProblem(const std::string& data_type) {
  static const std::set<std::string> kKeyTypes = {"tinyint", "smallint", "mediumint", "int", "bigint",
                                                  "char", "varchar", "tinytext", "text", "mediumtext", "longtext"};
  if (kKeyTypes.count(data_type)) return "";
  return "a " + data_type + " key column cannot be captured (capture reads integer and character keys)";
}

}  // namespace dsync::capture
