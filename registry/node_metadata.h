// The metadata JSON a node publishes with every heartbeat, and its tolerant parser.
//
//   {"version":"0.1.0","weight":1,"capacity":8,"prefetch":8,"processing_count":3,"load":0.375,
//    "topics":["SPACE_ADD"],"host":"web-3","pid":4242,"started_at":"2026-11-20T10:00:00.000Z",
//    "incarnation":"web-3:4242:1763632800000"}
//
// `topics` empty or containing "*" means the node serves every topic.
//
// Thread safety: value types and pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dsync::registry {

inline constexpr const char* kMetadataVersion = "1";

struct NodeMetadata {
  std::string version;          // dsync version of the node
  double weight = 1.0;
  int capacity = 1;             // parallel events the node runs
  int prefetch = 0;             // events it may hold assigned beyond capacity (queued)
  int processing_count = 0;     // events it runs now, by its own count
  double load = 0.0;            // processing_count / capacity, by its own count
  std::vector<std::string> topics;  // empty: all topics
  std::string host;
  int64_t pid = 0;
  std::string started_at;       // ISO-8601 UTC
  std::string incarnation;      // host:pid:start-ms; differs for every process

  bool ServesTopic(const std::string& topic) const;
  std::string ToJson() const;
};

struct ParsedMetadata {
  NodeMetadata metadata;
  // Set when the text was missing or malformed; `metadata` then holds the safe
  // defaults (capacity 1, every topic) plus whatever fields were readable.
  std::optional<std::string> problem;
};

// Never throws. Wrong-typed or out-of-range fields (capacity < 1, negative prefetch,
// negative load, topics not a list of strings) are reported in `problem` and
// defaulted (prefetch 0: a node that says nothing about it gets none).
ParsedMetadata ParseNodeMetadata(const std::optional<std::string>& text);

}  // namespace dsync::registry
