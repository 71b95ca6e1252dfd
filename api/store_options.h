// The API module's options: what api::EventStore, api::ControlStore and
// api::VerifyService read of the configuration, built from the settings in one place
// (app/options.h StoreOptionsFrom) and handed to them instead of the whole Settings.
// Each field: its config key, what it means, its default (the configured default).
//
//   api::EventStore store(pool, app::StoreOptionsFrom(settings));
//
// Thread safety: a value type.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "config/settings.h"
#include "core/service.h"

namespace dsync::api {

struct StoreOptions {
  std::string service = kDefaultService;  // service: the events, nodes, batches and pauses the API sees and writes. Default kbs-sync
  // topics: what may be produced (names checked), with each topic's priority and
  // max_retry for new events; the pauses' and verifies' topics. Default {}
  std::map<std::string, TopicSettings> topics;
  std::map<std::string, ScheduleSettings> schedules;  // schedules: listed by /v1/schedules and `dsync schedules`. Default {}
  std::map<std::string, std::string> datasources;     // datasources: name -> URL, the sides a verify compares. Default {}
  RelaySettings relay;                                // relay.*: a verify across the gap's window and waits (config/settings.h)
  int64_t max_payload_bytes = 1048576;                // api.max_body_bytes: the largest payload an event may carry. Default 1 MiB
  Millis offline_timeout{30000};                      // registry.offline_timeout_ms: which nodes are live (drain, health). Default 30 s
};

}  // namespace dsync::api
