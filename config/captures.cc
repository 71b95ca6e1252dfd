// Parsing of the config's `captures` (config/captures.h). Messages name the JSON path
// and never echo a value beyond a short, printable name.
//
// Thread safety: stateless functions.
#include "config/captures.h"

#include <set>
#include <string_view>

#include "core/error.h"

namespace dsync {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxCaptureTables = 100;
constexpr size_t kMaxWhereChars = 4000;

// A name shown in a message: printable ASCII, at most 64 characters.
std::string Shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return s.size() > 64 ? out + "..." : out;
}

[[noreturn]] void CaptureFail(const std::string& where, const std::string& reason) {
  throw ConfigError("config: " + where + ": " + reason);
}

bool IsTableName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
    if (!ok) return false;
  }
  return true;
}

std::string Text(const json& v, const std::string& where) {
  if (!v.is_string()) CaptureFail(where, "expected a string");
  if (v.get_ref<const std::string&>().empty()) CaptureFail(where, "must not be empty");
  return v.get<std::string>();
}

CaptureSettings ParseOne(const json& value, const std::string& where) {
  if (!value.is_object()) CaptureFail(where, "expected an object");
  CaptureSettings c;
  for (const auto& [key, member] : value.items()) {
    const std::string path = where + "." + Shown(key);
    if (key == "source") {
      c.source = Text(member, path);
    } else if (key == "target") {
      c.target = Text(member, path);
    } else if (key == "tables") {
      if (!member.is_array() || member.empty() || member.size() > kMaxCaptureTables) {
        CaptureFail(path, "expected an array of 1 to " + std::to_string(kMaxCaptureTables) + " table names");
      }
      std::set<std::string> seen;
      for (size_t i = 0; i < member.size(); ++i) {
        const std::string item = path + "[" + std::to_string(i) + "]";
        const std::string t = Text(member[i], item);
        if (!IsTableName(t)) CaptureFail(item, "a table name is 1 to 64 characters of A-Z a-z 0-9 _ $");
        if (!seen.insert(t).second) CaptureFail(item, "table '" + t + "' is listed twice");
        c.tables.push_back(t);
      }
    } else if (key == "where") {
      if (!member.is_object()) CaptureFail(path, "expected an object of table name -> filter");
      for (const auto& [table, filter] : member.items()) {
        const std::string item = path + "." + Shown(table);
        const std::string f = Text(filter, item);
        if (f.size() > kMaxWhereChars) CaptureFail(item, "must be at most " + std::to_string(kMaxWhereChars) + " characters");
        c.where[table] = f;
      }
    } else if (key == "lag_bound_s") {
      if (!member.is_number_integer() || member.get<int64_t>() < 1 || member.get<int64_t>() > 86400) {
        CaptureFail(path, "expected an integer number of seconds from 1 to 86400");
      }
      c.lag_bound_s = member.get<int>();
    } else {
      CaptureFail(path, "unknown key");
    }
  }
  if (c.source.empty()) CaptureFail(where + ".source", "required");
  if (c.target.empty()) CaptureFail(where + ".target", "required");
  if (c.tables.empty()) CaptureFail(where + ".tables", "required");
  for (const auto& [table, _] : c.where) {
    bool listed = false;
    for (const auto& t : c.tables) listed = listed || t == table;
    if (!listed) CaptureFail(where + ".where." + Shown(table), "table is not in " + where + ".tables");
  }
  return c;
}

}  // namespace

bool IsCaptureName(const std::string& name) {
  if (name.empty() || name.size() > 40) return false;
  for (char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::map<std::string, CaptureSettings> ParseCaptures(const json& value) {
  if (!value.is_object()) CaptureFail("captures", "expected an object of capture name -> capture");
  std::map<std::string, CaptureSettings> out;
  for (const auto& [name, member] : value.items()) {
    const std::string where = "captures." + Shown(name);
    if (!IsCaptureName(name)) CaptureFail(where, "a capture name is 1 to 40 characters of A-Z a-z 0-9 _ -");
    out[name] = ParseOne(member, where);
  }
  return out;
}

void ValidateCaptures(const std::map<std::string, CaptureSettings>& captures,
                      const std::map<std::string, std::string>& datasources) {
  for (const auto& [name, c] : captures) {
    const std::string where = "captures." + name;
    if (!datasources.count(c.source)) CaptureFail(where + ".source", "unknown datasource '" + Shown(c.source) + "'");
    if (!datasources.count(c.target)) CaptureFail(where + ".target", "unknown datasource '" + Shown(c.target) + "'");
    if (c.source == c.target) CaptureFail(where + ".target", "must differ from the source");
  }
}

}  // namespace dsync
