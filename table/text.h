// Wording shared by the table steps' messages (table_sync, table_delete, table_verify):
// user text made safe for a one-line message, and the kind of a JSON value given where
// another was expected. Internal to table/ (used by the table steps and verify).
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsync::table {

// User text inside a one-line message: control characters as '?', at most 64
// characters, then "...".
inline std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) {
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  if (s.size() > 64) out += "...";
  return out;
}

// "null", "a boolean", "an integer", "a number" (any other), "a string", "an array" or
// "an object".
inline std::string JsonKind(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

}  // namespace dsync::table
