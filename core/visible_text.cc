// Text from the database shown to a person (see visible_text.h).
//
// Thread safety: pure functions.
#include "core/visible_text.h"

#include <cstdio>

namespace dsync {
namespace {

// Decodes the code point at text[i]; its length in *len. 0 in *len: not well-formed
// UTF-8 there.
uint32_t Decode(std::string_view text, size_t i, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  *len = 0;
  if (n == 0 || i + n > text.size()) return 0;
  uint32_t cp = n == 1 ? c : c & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) {
    const unsigned char cc = static_cast<unsigned char>(text[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3f);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  *len = n;
  return cp;
}

std::string Hex(const char* format, unsigned value) {
  char buf[16];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

}  // namespace

bool IsHiddenCharacter(uint32_t cp) {
  return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) || cp == 0x061c || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x2069) ||
         cp == 0xfeff;
}

std::optional<uint32_t> FirstHiddenCharacter(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    const uint32_t cp = Decode(text, i, &len);
    if (len == 0) {
      ++i;
      continue;
    }
    if (IsHiddenCharacter(cp)) return cp;
    i += len;
  }
  return std::nullopt;
}

std::optional<size_t> FirstInvalidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    Decode(text, i, &len);
    if (len == 0) return i;
    i += len;
  }
  return std::nullopt;
}

std::string CodePointName(uint32_t cp) { return Hex("U+%04X", cp); }

std::string VisibleText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    const uint32_t cp = Decode(text, i, &len);
    if (len == 0) {
      out += Hex("\\x%02x", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (!IsHiddenCharacter(cp)) {
      out.append(text.substr(i, len));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x80) {
      out += Hex("\\x%02x", cp);
    } else {
      out += Hex("\\u%04x", cp);
    }
    i += len;
  }
  return out;
}

std::string JsonForTerminal(const nlohmann::json& value, int indent) {
  // dump escapes what is below 0x20; the rest of the hidden characters can only
  // stand inside strings, where a \u escape is the same character to a parser.
  const std::string text = value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    const uint32_t cp = Decode(text, i, &len);
    if (len == 0) {  // cannot happen after replace; keep the byte's meaning visible anyway
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (cp >= 0x20 && IsHiddenCharacter(cp)) {
      out += Hex("\\u%04x", cp);
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

}  // namespace dsync
