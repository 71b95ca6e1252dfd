// Logging: spdlog to stderr, one line per event. Every line names its event code
// first (e.g. "HEARTBEAT_FAILED node=10.0.0.5:7001 err=..."), then key=value pairs,
// so logs grep and parse without a schema.
//
// Thread safety: spdlog's default logger is thread-safe; SetupLogging must run once
// in main before other threads start.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace dsync {

// Installs the process logger. `level` is trace|debug|info|warn|error|off;
// throws UsageError on anything else. `role` tags every line (e.g. "node").
void SetupLogging(const std::string& level, const std::string& role);

}  // namespace dsync
