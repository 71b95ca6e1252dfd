// Every module's options, built from the settings here and nowhere else: a module takes
// its one Options struct (each field's config key, meaning and default beside it),
// never the whole Settings (config/settings.h). What a command's flags add on top
// (--node-address, --topics, --datasources; the API's worker count) the command adds to
// what these return.
//
//   dispatcher::DispatcherService service(*pool, app::DispatcherOptionsFrom(settings), clock);
//   api::EventStore store(*pool, app::StoreOptionsFrom(settings));
//
// Behaviour: pure functions of the settings; the defaults of a field without a config
// key are the struct's.
#pragma once

#include "api/http_server.h"
#include "api/store_options.h"
#include "config/settings.h"
#include "consumer/consumer_node.h"
#include "control/scheduler.h"
#include "dispatcher/assignment_planner.h"
#include "dispatcher/batch_completer.h"
#include "dispatcher/dispatch_cycle.h"
#include "dispatcher/dispatcher_service.h"
#include "dispatcher/event_sweeper.h"

namespace dsync::app {

// The dispatcher and its parts (each part's own function below).
dispatcher::DispatcherOptions DispatcherOptionsFrom(const Settings& s);
// dispatcher.batch_size and each topic's strategy / ordered / batch_limit /
// datasources / concurrency limit; fairness.*; datasources' max_concurrent_steps. An
// unknown strategy name (Settings rejects them) falls back to least_load.
dispatcher::PlannerConfig PlannerConfigFrom(const Settings& s);
dispatcher::CycleOptions CycleOptionsFrom(const Settings& s);
dispatcher::SweeperOptions SweeperOptionsFrom(const Settings& s);
dispatcher::BatchCompleterOptions BatchCompleterOptionsFrom(const Settings& s);
control::SchedulerOptions SchedulerOptionsFrom(const Settings& s);

// A consumer node's options from the settings; node_address, topics and datasources
// (flags) are the command's to fill (app/commands.cc NodeOptions).
consumer::ConsumerOptions ConsumerOptionsFrom(const Settings& s);

// The API's stores (api::EventStore, api::ControlStore, api::VerifyService).
api::StoreOptions StoreOptionsFrom(const Settings& s);
// listen, token, allowed_hosts and connection.max_body_bytes from the config's `api`
// section; the rest the struct's defaults.
api::HttpOptions HttpOptionsFrom(const Settings& s);

}  // namespace dsync::app
