// The config's `captures` (DESIGN.md "CONTRACT: third-round additions"; docs/capture.md):
// continuous sync of tables from a source datasource's binlog to a target datasource.
//
//   "captures": {
//     "orders": { "source": "env_a", "target": "env_b", "tables": ["orders", "order_line"],
//                 "where": { "orders": "tenant_id = 7" }, "lag_bound_s": 10 }
//   }
//
// Parsed with the rest of the configuration (config/settings.h) into CaptureSettings;
// every error is a ConfigError naming the JSON path. Cross-references to datasources
// are checked by ValidateCaptures (after the whole file is read).
//
// Thread safety: value types.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsync {

struct CaptureSettings {
  std::string source;                        // captures.<name>.source: datasource read as a replica. Required
  std::string target;                        // captures.<name>.target: datasource written. Required, not the source
  std::vector<std::string> tables;           // captures.<name>.tables: 1..100 table names ([A-Za-z0-9_$], <= 64). Required
  std::map<std::string, std::string> where;  // captures.<name>.where: table -> filter (table_sync grammar, no :names). Default {}
  int lag_bound_s = 10;                      // captures.<name>.lag_bound_s: a lag above it (seconds) is listed in
                                             // v_events_needing_attention (capture_lagging). 1..86400, default 10
};

// A capture name: 1..40 characters of A-Z a-z 0-9 _ - (it is part of event codes).
bool IsCaptureName(const std::string& name);

// Parses the `captures` object. Throws ConfigError("config: captures.<name>.<key>: ...").
std::map<std::string, CaptureSettings> ParseCaptures(const nlohmann::json& value);

// Every capture's source and target are configured datasources, and differ. Throws
// ConfigError naming the key.
void ValidateCaptures(const std::map<std::string, CaptureSettings>& captures,
                      const std::map<std::string, std::string>& datasources);

}  // namespace dsync
