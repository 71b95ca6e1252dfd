#include "table/relay_schema.h"

#include <array>

#include <nlohmann/json.hpp>

#include "table/relay_codec.h"

namespace dsync::table {
namespace {

constexpr std::array<std::pair<ColumnKind, const char*>, 8> kKinds = {{
    {ColumnKind::kText, "text"},
    {ColumnKind::kTemporal, "temporal"},
    {ColumnKind::kSigned, "signed"},
    {ColumnKind::kUnsigned, "unsigned"},
    {ColumnKind::kDecimal, "decimal"},
    {ColumnKind::kFloat, "float"},
    {ColumnKind::kBit, "bit"},
    {ColumnKind::kBinary, "binary"},
}};

const char* KindName(ColumnKind k) {
  for (const auto& [kind, name] : kKinds) {
    if (kind == k) return name;
  }
  return "text";
}

[[noreturn]] void Malformed(const std::string& what) {
  throw RelayFormatError("relay schema: " + what);
}

}  // namespace

std::string RelaySchemaJson(const TableSchema& schema, const TableShape& shape) {
  nlohmann::json cols = nlohmann::json::array();
  for (const Column& c : schema.columns) {
    cols.push_back({{"name", c.name},
                    {"kind", KindName(c.kind)},
                    {"type", c.column_type},
                    {"precision", c.precision},
                    {"scale", c.scale},
                    {"generated", c.generated},
                    {"nullable", c.nullable}});
  }
  return nlohmann::json{{"label", schema.label},
                        {"table", schema.table},
                        {"columns", cols},
                        {"key", schema.key},
                        {"shape", shape.ToJson()}}
      .dump();
}

RelaySchema ParseRelaySchema(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) Malformed("not a JSON object");
  RelaySchema out;
  try {
    out.schema.label = j.at("label").get<std::string>();
    out.schema.table = j.at("table").get<std::string>();
    out.schema.key = j.at("key").get<std::vector<std::string>>();
    for (const nlohmann::json& c : j.at("columns")) {
      Column col;
      col.name = c.at("name").get<std::string>();
      const std::string kind = c.at("kind").get<std::string>();
      bool known = false;
      for (const auto& [k, name] : kKinds) {
        if (kind == name) {
          col.kind = k;
          known = true;
        }
      }
      if (!known) Malformed("column '" + col.name + "' has an unknown kind '" + kind + "'");
      col.column_type = c.at("type").get<std::string>();
      col.precision = c.at("precision").get<int>();
      col.scale = c.at("scale").get<int>();
      col.generated = c.at("generated").get<bool>();
      col.nullable = c.at("nullable").get<bool>();
      out.schema.columns.push_back(std::move(col));
    }
  } catch (const nlohmann::json::exception& e) {
    Malformed(std::string("a field is missing or of the wrong type (") + e.what() + ")");
  }
  std::optional<TableShape> shape = TableShape::FromJson(j.value("shape", nlohmann::json()));
  if (!shape) Malformed("no table shape");
  out.shape = std::move(*shape);
  return out;
}

}  // namespace dsync::table
