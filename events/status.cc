#include "events/status.h"

#include <stdexcept>

namespace dsync::events {

const std::string& ToText(EventStatus s) {
  static const std::array<std::string, kEventStatuses.size()> kText = {
      DSYNC_STATUS_TEXT_PENDING, DSYNC_STATUS_TEXT_ASSIGNED,     DSYNC_STATUS_TEXT_RUNNING,
      DSYNC_STATUS_TEXT_SUCCESS, DSYNC_STATUS_TEXT_FAILED,       DSYNC_STATUS_TEXT_COMPENSATING,
      DSYNC_STATUS_TEXT_COMPENSATED};
  return kText[static_cast<size_t>(s)];
}

const std::string& ToText(StepStatus s) {
  static const std::array<std::string, kStepStatuses.size()> kText = {
      DSYNC_STATUS_TEXT_PENDING, DSYNC_STATUS_TEXT_EXECUTING,    DSYNC_STATUS_TEXT_SUCCESS,
      DSYNC_STATUS_TEXT_FAILED,  DSYNC_STATUS_TEXT_COMPENSATING, DSYNC_STATUS_TEXT_COMPENSATED};
  return kText[static_cast<size_t>(s)];
}

EventStatus StoredEventStatus(std::string_view text) {
  if (std::optional<EventStatus> s = ParseEventStatus(text)) return *s;
  throw std::runtime_error("unknown event status '" + std::string(text) + "' in distribute_event");
}

std::string EventStatusList() {
  std::string out;
  for (EventStatus s : kEventStatuses) out += (out.empty() ? "" : ", ") + ToText(s);
  return out;
}

std::optional<EventStatus> ParseEventStatus(std::string_view text) {
  for (EventStatus s : kEventStatuses) {
    if (ToText(s) == text) return s;
  }
  return std::nullopt;
}

std::optional<StepStatus> ParseStepStatus(std::string_view text) {
  for (StepStatus s : kStepStatuses) {
    if (ToText(s) == text) return s;
  }
  return std::nullopt;
}

}  // namespace dsync::events
