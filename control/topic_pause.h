// Pausing a topic (docs/pause-and-schedules.md, V022 dsync_topic_pause): the rows
// `dsync pause` / `dsync resume`, POST /v1/topics/{topic}/pause|resume and the console
// write, and the read every dispatcher leader makes (at most every kPauseRefresh)
// (dispatcher/dispatch_cycle.cc keeps the paused topics' due events out of its pages,
// as it does for a topic at its batch_limit). A pause stops assignment only: events
// already ASSIGNED or RUNNING finish, and a paused topic's events wait PENDING (listed
// by v_events_needing_attention with reason `paused`) until it is resumed.
//
//   PauseTopic(c, "kbs-sync", "SPACE_ADD", "alice@ops-1", "maintenance");  // the row
//   ResumeTopic(c, "kbs-sync", "SPACE_ADD");                                // deletes it
//
// Thread safety: stateless functions (a Connection is used by one thread at a time);
// PausedTopicReader from one thread at a time.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "storage/connection.h"
#include "storage/connection_pool.h"

namespace dsync::control {

struct TopicPause {
  std::string service, topic, paused_by, reason;
  std::string paused_at;  // ISO 8601 UTC with milliseconds ("2026-11-27T19:20:00.123Z")
};

// Topic names a pause may name: 1-50 characters of A-Z a-z 0-9 _ . - (as the config's).
bool IsPausableTopicName(const std::string& topic);

// Pauses `topic` of `service`: inserts the row, unless one exists (then it is kept as
// it is: the first pause's author, time and reason stand). Returns the row as stored
// and whether this call created it. `paused_by` and `reason` are cut to their columns'
// sizes (128 and 512 bytes, at a character boundary). Throws DbError.
std::pair<TopicPause, bool> PauseTopic(storage::Connection& c, const std::string& service, const std::string& topic,
                                       const std::string& paused_by, const std::string& reason);

// Resumes `topic` of `service`: deletes the row. Returns the pause it ended, or
// nullopt when the topic was not paused. Throws DbError.
std::optional<TopicPause> ResumeTopic(storage::Connection& c, const std::string& service, const std::string& topic);

// The service's pauses, by topic. Throws DbError.
std::vector<TopicPause> ReadPauses(storage::Connection& c, const std::string& service);

// How old the dispatcher's view of the pauses may be: it rereads the rows at most this
// often (not every cycle: under load a cycle runs every few milliseconds, and the read
// cost each one about half a millisecond). So a pause or resume takes effect within
// kPauseRefresh of its commit (plus the cycle in progress, which read before it), and
// PauseTopic's and ResumeTopic's callers that answer an operator (api::ControlStore:
// the CLI, the API, the console) wait kPauseSettle after the commit before they
// answer: once `dsync pause` returns, no dispatch cycle that starts afterwards
// assigns the topic's events.
inline constexpr Millis kPauseRefresh{200};
inline constexpr Millis kPauseSettle = kPauseRefresh + Millis(20);

// The dispatcher's read: the paused topics of a service (a range of the primary key),
// at most every kPauseRefresh, and one log line whenever the set it finds changes:
//   DISPATCH_PAUSED_TOPICS service=<s> paused=<t1,t2|-> resumed=<t3|->
// A failed read keeps the last set (a pause stays in force through a database hiccup)
// and is logged, never thrown: the cycle's own reads fail the cycle anyway; the next
// cycle tries again.
class PausedTopicReader {
 public:
  explicit PausedTopicReader(std::string service) : service_(std::move(service)) {}
  // The paused topics, reread when the last read is kPauseRefresh old (or never was).
  const std::vector<std::string>& Read(storage::ConnectionPool& pool, Clock::TimePoint now);

 private:
  const std::string service_;
  std::vector<std::string> topics_;  // sorted
  std::optional<Clock::TimePoint> read_at_;  // the last successful read
};

}  // namespace dsync::control
