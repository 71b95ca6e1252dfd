#include "registry/node_metadata.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/json_limits.h"

namespace dsync::registry {
namespace {

using nlohmann::json;

// Collects one line per bad field; the fields keep their defaults.
class Problems {
 public:
  void Add(const std::string& field, const std::string& what) {
    if (!text_.empty()) text_ += "; ";
    text_ += field + ": " + what;
  }
  std::optional<std::string> Take() {
    if (text_.empty()) return std::nullopt;
    return std::move(text_);
  }

 private:
  std::string text_;
};

// Absent and null fields keep their defaults silently: older or newer nodes may
// not publish every field.
const json* Field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// An integer in [min, max], or nullopt. Floats are not integers here, even 8.0.
std::optional<int64_t> Integer(const json& v, int64_t min, int64_t max) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) return std::nullopt;
    int64_t i = static_cast<int64_t>(u);
    return i >= min ? std::optional<int64_t>(i) : std::nullopt;
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    return i >= min && i <= max ? std::optional<int64_t>(i) : std::nullopt;
  }
  return std::nullopt;
}

void ReadString(const json& obj, const char* name, std::string& out, Problems& problems) {
  const json* v = Field(obj, name);
  if (v == nullptr) return;
  if (v->is_string()) out = v->get<std::string>();
  else problems.Add(name, "must be a string");
}

void ReadInt(const json& obj, const char* name, int64_t min, int64_t max, const char* rule,
             int64_t& out, Problems& problems) {
  const json* v = Field(obj, name);
  if (v == nullptr) return;
  if (auto i = Integer(*v, min, max)) out = *i;
  else problems.Add(name, rule);
}

// `positive`: > 0; otherwise >= 0.
void ReadNumber(const json& obj, const char* name, bool positive, const char* rule, double& out,
                Problems& problems) {
  const json* v = Field(obj, name);
  if (v == nullptr) return;
  if (v->is_number()) {
    double d = v->get<double>();
    if (positive ? d > 0 : d >= 0) {
      out = d;
      return;
    }
  }
  problems.Add(name, rule);
}

bool IsStringArray(const json& v) {
  return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& t) { return t.is_string(); });
}

void ReadTopics(const json& obj, std::vector<std::string>& out, Problems& problems) {
  const json* v = Field(obj, "topics");
  if (v == nullptr) return;
  if (!IsStringArray(*v)) {
    problems.Add("topics", "must be an array of strings (serving every topic)");
    return;
  }
  out.clear();
  for (const auto& t : *v) out.push_back(t.get<std::string>());
}

void ReadDatasources(const json& obj, NodeMetadata& md, Problems& problems) {
  const json* v = Field(obj, "datasources");
  if (v == nullptr) return;
  if (!IsStringArray(*v)) {
    problems.Add("datasources", "must be an array of strings (taken as reaching every datasource)");
    return;
  }
  std::vector<std::string> names;
  for (const auto& t : *v) names.push_back(t.get<std::string>());
  md.datasources = std::move(names);
}

// An object of name -> string.
void ReadStringMap(const json& obj, const char* name, std::map<std::string, std::string>& out,
                   Problems& problems) {
  const json* v = Field(obj, name);
  if (v == nullptr) return;
  bool ok = v->is_object() &&
            std::all_of(v->begin(), v->end(), [](const json& t) { return t.is_string(); });
  if (!ok) {
    problems.Add(name, "must be an object of strings");
    return;
  }
  out.clear();
  for (auto it = v->begin(); it != v->end(); ++it) out[it.key()] = it.value().get<std::string>();
}

void ReadAll(const json& obj, NodeMetadata& md, Problems& problems) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  int64_t capacity = md.capacity, prefetch = md.prefetch, processing = md.processing_count;
  ReadString(obj, "version", md.version, problems);
  ReadNumber(obj, "weight", /*positive=*/true, "must be a number > 0", md.weight, problems);
  ReadInt(obj, "capacity", 1, kIntMax, "must be an integer >= 1", capacity, problems);
  ReadInt(obj, "prefetch", 0, kIntMax, "must be an integer >= 0", prefetch, problems);
  ReadInt(obj, "processing_count", 0, kIntMax, "must be an integer >= 0", processing, problems);
  ReadNumber(obj, "load", /*positive=*/false, "must be a number >= 0", md.load, problems);
  ReadTopics(obj, md.topics, problems);
  ReadString(obj, "host", md.host, problems);
  ReadInt(obj, "pid", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
          "must be an integer", md.pid, problems);
  ReadString(obj, "started_at", md.started_at, problems);
  ReadString(obj, "incarnation", md.incarnation, problems);
  ReadDatasources(obj, md, problems);
  ReadStringMap(obj, "datasource_errors", md.datasource_errors, problems);
  ReadStringMap(obj, "bad_topics", md.bad_topics, problems);
  md.capacity = static_cast<int>(capacity);
  md.prefetch = static_cast<int>(prefetch);
  md.processing_count = static_cast<int>(processing);
}

}  // namespace

bool NodeMetadata::ServesTopic(const std::string& topic) const {
  if (topics.empty()) return true;
  return std::any_of(topics.begin(), topics.end(),
                     [&](const std::string& t) { return t == "*" || t == topic; });
}

bool NodeMetadata::ReachesDatasource(const std::string& name) const {
  return !datasources || std::find(datasources->begin(), datasources->end(), name) != datasources->end();
}

std::string NodeMetadata::ToJson() const {
  json j = {{"version", version},
            {"weight", weight},
            {"capacity", capacity},
            {"prefetch", prefetch},
            {"processing_count", processing_count},
            {"load", load},
            {"topics", topics},
            {"host", host},
            {"pid", pid},
            {"started_at", started_at},
            {"incarnation", incarnation}};
  if (datasources) j["datasources"] = *datasources;
  if (!datasource_errors.empty()) j["datasource_errors"] = datasource_errors;
  if (!bad_topics.empty()) j["bad_topics"] = bad_topics;
  // Invalid UTF-8 (a strange hostname) is replaced rather than thrown on.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

ParsedMetadata ParseNodeMetadata(const std::optional<std::string>& text) {
  ParsedMetadata out;
  try {
    if (!text || text->find_first_not_of(" \t\r\n") == std::string::npos) {
      out.problem = "metadata is missing";
      return out;
    }
    StoredJson parsed = ParseStoredJson(*text, "metadata");  // bounded depth (any SQL writer)
    if (parsed.problem != StoredJson::kNone) {
      out.problem = parsed.problem == StoredJson::kTooDeep ? parsed.message : "metadata is not valid JSON";
      return out;
    }
    json j = std::move(parsed.value);
    if (!j.is_object()) {
      out.problem = "metadata is not a JSON object";
      return out;
    }
    Problems problems;
    ReadAll(j, out.metadata, problems);
    out.problem = problems.Take();
  } catch (const std::exception& e) {
    // Not expected (every access above is type-checked); still never throw.
    out = ParsedMetadata();
    out.problem = std::string("metadata unreadable: ") + e.what();
  }
  return out;
}

}  // namespace dsync::registry
