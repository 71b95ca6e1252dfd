#include "control/topic_pause.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "events/columns.h"

namespace dsync::control {
namespace {

#define DSYNC_PAUSE_COLUMNS \
  "service, topic, paused_by, reason, CONCAT(LEFT(DATE_FORMAT(paused_at, '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')"

// Params: service, topic, paused_by, reason. An existing row is kept (first pause stands).
constexpr const char* kInsertPause =
    "INSERT IGNORE INTO dsync_topic_pause (service, topic, paused_by, paused_at, reason) VALUES (?, ?, ?, NOW(3), ?)";
// Params: service, topic.
constexpr const char* kSelectPause = "SELECT " DSYNC_PAUSE_COLUMNS " FROM dsync_topic_pause WHERE service = ? AND topic = ?";
constexpr const char* kSelectPauseForUpdate =
    "SELECT " DSYNC_PAUSE_COLUMNS " FROM dsync_topic_pause WHERE service = ? AND topic = ? FOR UPDATE";
constexpr const char* kDeletePause = "DELETE FROM dsync_topic_pause WHERE service = ? AND topic = ?";
// Params: service.
constexpr const char* kSelectPauses = "SELECT " DSYNC_PAUSE_COLUMNS " FROM dsync_topic_pause WHERE service = ? ORDER BY topic";
constexpr const char* kSelectPausedTopics = "SELECT topic FROM dsync_topic_pause WHERE service = ? ORDER BY topic";

constexpr size_t kMaxPausedBy = 128;
constexpr size_t kMaxPauseReason = 512;

TopicPause ReadPauseRow(storage::ResultSet& rs) {
  events::Columns col(rs);
  TopicPause p;
  p.service = col.String();
  p.topic = col.String();
  p.paused_by = col.String();
  p.reason = col.String();
  p.paused_at = col.String();
  return p;
}

// At most `max` bytes of `text`, cut at a UTF-8 character boundary.
std::string PauseCut(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

std::string TopicList(const std::vector<std::string>& topics) {
  std::string out;
  for (const auto& t : topics) out += (out.empty() ? "" : ",") + t;
  return out.empty() ? "-" : out;
}

}  // namespace

bool IsPausableTopicName(const std::string& topic) {
  if (topic.empty() || topic.size() > 50) return false;
  return std::all_of(topic.begin(), topic.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
  });
}

std::pair<TopicPause, bool> PauseTopic(storage::Connection& c, const std::string& service, const std::string& topic,
                                       const std::string& paused_by, const std::string& reason) {
  const bool created =
      c.Execute(kInsertPause, service, topic, PauseCut(paused_by, kMaxPausedBy), PauseCut(reason, kMaxPauseReason)) > 0;
  auto rs = c.Query(kSelectPause, service, topic);
  if (!rs->next()) throw DbError(DbError::Kind::kOther, 0, "the pause of topic " + topic + " vanished as it was written (resumed at once?)");
  return {ReadPauseRow(*rs), created};
}

std::optional<TopicPause> ResumeTopic(storage::Connection& c, const std::string& service, const std::string& topic) {
  auto rs = c.Query(kSelectPauseForUpdate, service, topic);
  if (!rs->next()) return std::nullopt;
  TopicPause p = ReadPauseRow(*rs);
  c.Execute(kDeletePause, service, topic);
  return p;
}

std::vector<TopicPause> ReadPauses(storage::Connection& c, const std::string& service) {
  std::vector<TopicPause> out;
  auto rs = c.Query(kSelectPauses, service);
  while (rs->next()) out.push_back(ReadPauseRow(*rs));
  return out;
}

const std::vector<std::string>& PausedTopicReader::Read(storage::ConnectionPool& pool, Clock::TimePoint at) {
  if (read_at_ && at - *read_at_ < kPauseRefresh) return topics_;
  std::vector<std::string> now;
  try {
    now = pool.Run("read paused topics", [&](storage::Connection& c) {
      std::vector<std::string> topics;
      auto rs = c.Query(kSelectPausedTopics, service_);
      while (rs->next()) topics.push_back(rs->getString(1));
      return topics;
    });
  } catch (const DbError& e) {
    spdlog::warn("DISPATCH_PAUSED_TOPICS_UNREAD service={} kept={} err={}", service_, TopicList(topics_), e.what());
    return topics_;
  }
  read_at_ = at;
  if (now != topics_) {
    std::vector<std::string> paused, resumed;
    std::set_difference(now.begin(), now.end(), topics_.begin(), topics_.end(), std::back_inserter(paused));
    std::set_difference(topics_.begin(), topics_.end(), now.begin(), now.end(), std::back_inserter(resumed));
    spdlog::info("DISPATCH_PAUSED_TOPICS service={} paused={} resumed={} now={}", service_, TopicList(paused),
                 TopicList(resumed), TopicList(now));
    topics_ = std::move(now);
  }
  return topics_;
}

}  // namespace dsync::control
