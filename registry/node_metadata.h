// The metadata JSON a node publishes with every heartbeat, and its tolerant parser.
//
//   {"version":"0.1.0","weight":1,"capacity":8,"prefetch":8,"processing_count":3,"load":0.375,
//    "topics":["SPACE_ADD"],"host":"web-3","pid":4242,"started_at":"2026-11-20T10:00:00.000Z",
//    "incarnation":"web-3:4242:1763632800000",
//    "datasources":["env_a"],"datasource_errors":{"env_b":"cannot connect ..."},
//    "bad_topics":{"DOC_SYNC":"topics.DOC_SYNC.steps[0] (docs): unknown step type 'x' ..."}}
//
// `topics` empty or containing "*" means the node serves every topic.
// `datasources` lists the config's datasources the node reached at its last check
// (narrowed by `dsync node --datasources`); the field ABSENT means a node of an older
// version that does not report it, taken as reaching every datasource (as before, so
// a rolling upgrade keeps routing); PRESENT and empty means it reaches none (a node
// that has not finished its first check yet). `bad_topics` are topics whose plan this
// node could not build: it serves its other topics and takes no event of these.
//
// Thread safety: value types and pure functions.
#pragma once

#include <map>
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
  std::string host{};
  int64_t pid = 0;
  std::string started_at{};     // ISO-8601 UTC
  std::string incarnation;      // host:pid:start-ms; differs for every process
  // Datasources reached at the last check; nullopt: not reported (an older node),
  // taken as reaching all of them.
  std::optional<std::vector<std::string>> datasources;
  std::map<std::string, std::string> datasource_errors{};  // name -> why the last check failed
  std::map<std::string, std::string> bad_topics;         // topic -> why its plan failed to build

  bool ServesTopic(const std::string& topic) const;
  // False only when `datasources` is reported and lacks `name`.
  bool ReachesDatasource(const std::string& name) const;
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
// defaulted (prefetch 0: a node that says nothing about it gets none). A malformed
// `datasources` reads as not reported (reaching all: the behaviour before nodes
// reported it); malformed `datasource_errors` / `bad_topics` read as empty.
ParsedMetadata ParseNodeMetadata(const std::optional<std::string>& text);

}  // namespace dsync::registry
