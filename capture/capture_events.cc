// Events of a capture (capture/capture_events.h).
//
// Thread safety: pure functions.
#include "capture/capture_events.h"

#include <cstdio>
#include <map>

namespace dsync::capture {
namespace {

using nlohmann::json;

uint64_t Fnv64(std::string_view s, uint64_t h = 14695981039346656037ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

events::NewEventRow BaseRow(const EventContext& ctx, std::string code, std::string data_id, const json& payload) {
  events::NewEventRow row;
  row.tenant_id = kCaptureTenant;
  row.code = std::move(code);
  row.data_id = std::move(data_id);
  row.topic = kCaptureTopic;
  row.payload = payload.dump();
  row.max_retry = kCaptureMaxRetry;
  row.service = ctx.service;
  row.route = ctx.route;
  row.trace_id = row.code;
  return row;
}

}  // namespace

std::string LaneOf(const std::string& capture, int shard, const std::string& table) {
  std::string lane = capture + "#" + std::to_string(shard) + "#" + table;
  if (lane.size() <= 64) return lane;
  return capture + "#" + std::to_string(shard) + "#" + Hex64(Fnv64(table, Fnv64(capture)));  // names are <= 40
}

std::string SchemaToken(const json& copy_events) { return Hex64(Fnv64(copy_events.dump())); }

std::string BoundedCode(const std::string& text) {
  if (text.size() <= 64) return text;
  return "cap:" + Hex64(Fnv64(text)) + Hex64(Fnv64(text, 0x9e3779b97f4a7c15ull));
}

std::vector<events::NewEventRow> KeyedSyncEvents(const EventContext& ctx, const std::vector<CapturedTransaction>& batch) {
  std::vector<events::NewEventRow> out;
  if (batch.empty()) return out;
  // table -> shard -> keys (each once, in first-seen order of their text)
  std::map<std::string, std::map<int, std::map<std::string, json>>> grouped;
  for (const CapturedTransaction& t : batch) {
    for (const auto& [table, keys] : t.keys) {
      for (const auto& [text, key] : keys) {
        const int shard = static_cast<int>(Fnv64(text, Fnv64(table)) % kCaptureShards);
        grouped[table][shard].emplace(text, key);
      }
    }
  }
  const CapturedTransaction& last = batch.back();
  const std::string prefix = "cap:" + ctx.capture + ":" + last.GtidText() + ":";
  int n = 0;
  for (const auto& [table, shards] : grouped) {
    for (const auto& [shard, keys] : shards) {
      json chunk = json::array();
      auto flush = [&] {
        json payload = {{"capture", ctx.capture}, {"table", table}, {"keys", chunk},
                        {"gtid", last.GtidText()}, {"committed_at", last.committed_at}};
        if (!ctx.schema.empty()) payload["schema"] = ctx.schema;
        out.push_back(BaseRow(ctx, BoundedCode(prefix + std::to_string(n++)), LaneOf(ctx.capture, shard, table),
                              payload));
        chunk = json::array();
      };
      for (const auto& [_, key] : keys) {
        chunk.push_back(key);
        if (chunk.size() == kMaxKeysPerEvent) flush();
      }
      if (!chunk.empty()) flush();
    }
  }
  return out;
}

std::vector<events::NewEventRow> CopyEvents(const EventContext& ctx, const std::vector<std::string>& tables,
                                            const std::string& start_gtid, const std::string& salt) {
  std::vector<events::NewEventRow> out;
  const std::string position = Hex64(Fnv64(start_gtid + "#" + salt)).substr(0, 8);
  for (const std::string& table : tables) {
    json payload = {{"capture", ctx.capture}, {"table", table}, {"copy", true}, {"gtid", start_gtid}};
    out.push_back(BaseRow(ctx, BoundedCode("cap:" + ctx.capture + ":copy:" + position + ":" + table),
                          ctx.capture + "#copy#" + table.substr(0, 16), payload));
  }
  return out;
}

}  // namespace dsync::capture
