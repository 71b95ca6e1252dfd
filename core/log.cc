#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace dsync {

void SetupLogging(const std::string& level, const std::string& role) {
  auto parsed = spdlog::level::from_str(level);
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (parsed == spdlog::level::off && level != "off") {
    throw UsageError("unknown log level '" + level +
                     "' (use trace, debug, info, warn, error or off)");
  }
  spdlog::drop("dsync");
  auto logger = spdlog::stderr_color_mt("dsync");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%-5l%$ " + role + "[%P] %v",
                      spdlog::pattern_time_type::utc);
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace dsync
