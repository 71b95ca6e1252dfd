// What each step of a topic's plan needs to reach: the one place that decides which
// datasources a step touches, used by the dispatcher (which nodes may take an event's
// next piece of work, dispatcher/assignment_planner.h) and by the saga engine (whether
// this node may run a step or must hand the event on, saga/event_run.h).
//
//   StepDatasources(spec)          table_sync, table_verify: source and target;
//                                  table_delete: target; every other type: none
//   CompensationDatasources(spec)  the step's target only (its undo records live there)
//   RelayedDatasources(spec)       table_sync, table_verify: its target (when no node
//                                  reaches both, a node reaching the target runs it relayed)
//   RouteKey({"env_b", "env_a"})   "env_a,env_b": distribute_event.route's form
//
// A datasource a step names but the config does not define is not a config error: it
// is a routing fact (a node's config names only the datasources it reaches), decided
// at run time. table_repair names no datasource in its spec (it repairs the table_sync
// step its event's payload names), so it needs none here.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/settings.h"

namespace dsync {

// The datasources a forward run of the step touches, sorted and unique.
std::vector<std::string> StepDatasources(const StepSpec& spec);

// The datasources the step's compensation touches (its `target`), sorted and unique.
std::vector<std::string> CompensationDatasources(const StepSpec& spec);

// Relayed sync (docs/relay.md): what a node must reach to run the step as the owner of
// a relayed run when no node reaches all of StepDatasources (table_sync, table_verify: its `target`;
// the source half runs elsewhere, as an event of its own); empty: the step cannot be
// relayed (every other type).
std::vector<std::string> RelayedDatasources(const StepSpec& spec);
// The source half's side of a relayable step (table_sync, table_verify: its `source`); empty otherwise.
std::vector<std::string> RelaySourceDatasources(const StepSpec& spec);

// The internal topic whose events are the source halves of relayed steps, and its one
// step type. Topic names starting with "dsync." are reserved for dsync.
inline constexpr const char* kRelaySourceTopic = "dsync.relay_source";
inline constexpr const char* kRelaySourceStepType = "relay_source";
inline constexpr const char* kReservedTopicPrefix = "dsync.";

// Sorted, unique names joined by commas; "" for none. Names never hold a comma (the
// config's datasource names are checked at load: see ValidDatasourceName).
std::string RouteKey(std::vector<std::string> names);
// The names of a RouteKey ("" or NULL: none).
std::vector<std::string> ParseRoute(std::string_view route);

// "env_a", "env_a and env_b", "env_a, env_b and env_c": for one-line reasons.
std::string SpokenList(const std::vector<std::string>& names);

}  // namespace dsync
