// The events a capture produces (docs/capture.md "Events"): every captured change
// becomes a keyed sync of the changed rows, an event of dsync's own topic
// kCaptureTopic whose one step (saga/steps/capture_step.h) re-reads those rows from
// the source by key when it runs and applies them to the target with table_sync's
// chunk writer and undo records.
//
// Grouping and order. The transactions of one commit (a batch, capture/capture_runner.h)
// are merged: each table's changed keys, each key once, are split into kCaptureShards
// shards by a hash of (table, key), and each shard's keys into events of at most
// kMaxKeysPerEvent. An event's ordering key (its lane) is (kCaptureTenant,
// "<capture>#<shard>#<table>"), and the topic is ordered: events of one lane never run
// at once and run in the order they were produced, so a later change of a row is
// applied after an earlier one. A capture of T tables has T x kCaptureShards lanes
// running in parallel.
//
// Codes. "cap:<capture>:<last GTID of the batch>:<n>", n the event's place in the
// batch (a 64-bit hash replaces the text when it would exceed the 64 characters of a
// code). A batch ends at a distinct GTID, so codes never repeat, and a batch written
// twice (it cannot be: capture/capture_store.h) would be produced once.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/captures.h"
#include "events/produce.h"
#include "capture/transactions.h"

namespace dsync::capture {

inline constexpr const char* kCaptureTopic = "dsync.capture";
inline constexpr const char* kCaptureStepType = "capture_sync";
inline constexpr const char* kCaptureTenant = "dsync.capture";
constexpr int kCaptureShards = 4;
constexpr size_t kMaxKeysPerEvent = 1000;
constexpr int kCaptureMaxRetry = 10;

// What every event of a capture carries besides its keys.
struct EventContext {
  std::string capture;        // its name
  std::string service;        // the events' service
  std::string route;          // RouteKey({source, target})
  // Names the tables' last copy (a hash of the capture's copy_events): it changes when
  // a resume copies tables again after a DDL, so a node's description of a table
  // (saga/steps/capture_step.h) is never one taken before the operator aligned it.
  std::string schema{};
};

// The `schema` of EventContext for the copy_events of the capture's row.
std::string SchemaToken(const nlohmann::json& copy_events);

// The ordering key of a table's shard: "<capture>#<shard>#<table>", at most 64
// characters (a hash of the table replaces it when longer).
std::string LaneOf(const std::string& capture, int shard, const std::string& table);

// A code of at most 64 characters: `text`, or "cap:" and a hash of it when longer.
std::string BoundedCode(const std::string& text);

// The keyed-sync events of a batch of transactions ending at `last` (its GTID names
// the codes). Payload: {"capture", "table", "keys": [[...], ...], "gtid", "committed_at"}
// and "schema" (EventContext::schema) when it is not empty.
std::vector<events::NewEventRow> KeyedSyncEvents(const EventContext& ctx, const std::vector<CapturedTransaction>& batch);

// The copy events of `tables` (the initial copy, or the tables a resume unpauses): one full sync per table (payload {"capture", "table",
// "copy": true}), coded "cap:<capture>:copy:<hash of start position and salt>:<table>"
// (`salt` tells two copies from one position apart: the lease token and a time).
std::vector<events::NewEventRow> CopyEvents(const EventContext& ctx, const std::vector<std::string>& tables,
                                            const std::string& start_gtid, const std::string& salt);

}  // namespace dsync::capture
