#include "config/step_datasources.h"

#include <algorithm>
#include <set>

namespace dsync {
namespace {

void AddParam(const StepSpec& spec, const char* key, std::set<std::string>& out) {
  auto it = spec.params.find(key);
  if (it != spec.params.end() && it->is_string() && !it->get_ref<const std::string&>().empty()) {
    out.insert(it->get<std::string>());
  }
}

}  // namespace

std::vector<std::string> StepDatasources(const StepSpec& spec) {
  std::set<std::string> names;
  // table_verify reads both sides like the sync it checks.
  if (spec.type == "table_sync" || spec.type == "table_verify") {
    AddParam(spec, "source", names);
    AddParam(spec, "target", names);
  } else if (spec.type == "table_delete") {
    AddParam(spec, "target", names);
  }
  return {names.begin(), names.end()};
}

std::vector<std::string> CompensationDatasources(const StepSpec& spec) {
  std::set<std::string> names;
  if (spec.type == "table_sync" || spec.type == "table_verify" || spec.type == "table_delete") {
    AddParam(spec, "target", names);
  }
  return {names.begin(), names.end()};
}

std::vector<std::string> RelayedDatasources(const StepSpec& spec) {
  std::set<std::string> names;
  if (spec.type == "table_sync" || spec.type == "table_verify") AddParam(spec, "target", names);
  return {names.begin(), names.end()};
}

std::vector<std::string> RelaySourceDatasources(const StepSpec& spec) {
  std::set<std::string> names;
  if (spec.type == "table_sync" || spec.type == "table_verify") AddParam(spec, "source", names);
  return {names.begin(), names.end()};
}

std::string RouteKey(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ',';
    out += n;
  }
  return out;
}

std::vector<std::string> ParseRoute(std::string_view route) {
  std::set<std::string> names;
  while (!route.empty()) {
    const size_t comma = route.find(',');
    std::string_view part = route.substr(0, comma);
    if (!part.empty()) names.emplace(part);
    if (comma == std::string_view::npos) break;
    route.remove_prefix(comma + 1);
  }
  return {names.begin(), names.end()};
}

std::string SpokenList(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace dsync
