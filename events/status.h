// Event and step statuses: the enums the code uses, and the one place where they
// become the text the database stores (DESIGN.md, CONTRACT: tables). Every other file
// converts through ToText / Parse*Status (values bound to statements, rows read) or,
// inside SQL text built at compile time, through DSYNC_SQL_STATUS(NAME), which
// expands to the quoted SQL literal ('PENDING') of the same one spelling below. SQL in
// sql/migrations/ and its views spells the values itself.
//
//   c.Execute("UPDATE distribute_event SET status = ? WHERE id = ?", ToText(EventStatus::kPending), id);
//   "SELECT … WHERE status = " DSYNC_SQL_STATUS(PENDING) " AND …"
//   std::optional<EventStatus> s = ParseEventStatus(col.String());
//
// Thread safety: pure functions over constants.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

// The one spelling of each status text (event and step statuses share their names).
#define DSYNC_STATUS_TEXT_PENDING "PENDING"
#define DSYNC_STATUS_TEXT_ASSIGNED "ASSIGNED"
#define DSYNC_STATUS_TEXT_RUNNING "RUNNING"
#define DSYNC_STATUS_TEXT_EXECUTING "EXECUTING"
#define DSYNC_STATUS_TEXT_SUCCESS "SUCCESS"
#define DSYNC_STATUS_TEXT_FAILED "FAILED"
#define DSYNC_STATUS_TEXT_COMPENSATING "COMPENSATING"
#define DSYNC_STATUS_TEXT_COMPENSATED "COMPENSATED"
// A status as an SQL string literal inside statement text: DSYNC_SQL_STATUS(PENDING)
// is "'PENDING'" (adjacent literals concatenate: "WHERE status = " DSYNC_SQL_STATUS(PENDING)).
#define DSYNC_SQL_STATUS(name) "'" DSYNC_STATUS_TEXT_##name "'"
// Event status sets the statements use often, as SQL lists: `status IN " DSYNC_SQL_IN_FLIGHT "`.
// In flight: held by a node (assigned or claimed).
#define DSYNC_SQL_IN_FLIGHT "(" DSYNC_SQL_STATUS(ASSIGNED) ", " DSYNC_SQL_STATUS(RUNNING) ", " DSYNC_SQL_STATUS(COMPENSATING) ")"
// Claimed: a node is running it (forward or compensating).
#define DSYNC_SQL_CLAIMED "(" DSYNC_SQL_STATUS(RUNNING) ", " DSYNC_SQL_STATUS(COMPENSATING) ")"
// Terminal: IsTerminal.
#define DSYNC_SQL_TERMINAL "(" DSYNC_SQL_STATUS(SUCCESS) ", " DSYNC_SQL_STATUS(FAILED) ", " DSYNC_SQL_STATUS(COMPENSATED) ")"

namespace dsync::events {

// distribute_event.status.
enum class EventStatus { kPending, kAssigned, kRunning, kSuccess, kFailed, kCompensating, kCompensated };
// distribute_event_step.status.
enum class StepStatus { kPending, kExecuting, kSuccess, kFailed, kCompensating, kCompensated };

inline constexpr std::array<EventStatus, 7> kEventStatuses = {
    EventStatus::kPending, EventStatus::kAssigned,     EventStatus::kRunning,    EventStatus::kSuccess,
    EventStatus::kFailed,  EventStatus::kCompensating, EventStatus::kCompensated};
inline constexpr std::array<StepStatus, 6> kStepStatuses = {
    StepStatus::kPending, StepStatus::kExecuting,    StepStatus::kSuccess,
    StepStatus::kFailed,  StepStatus::kCompensating, StepStatus::kCompensated};

// The database's text ("PENDING", ...). A const std::string so that it binds as a
// statement parameter as it is.
const std::string& ToText(EventStatus s);
const std::string& ToText(StepStatus s);

// The status a stored text names; nullopt for any other text (a typo, another table's
// state). Exact and case-sensitive.
std::optional<EventStatus> ParseEventStatus(std::string_view text);
std::optional<StepStatus> ParseStepStatus(std::string_view text);

// The status of a row read by a statement that selects only known statuses (`status IN
// (…)`): throws std::runtime_error naming the text for any other.
EventStatus StoredEventStatus(std::string_view text);

// "PENDING, ASSIGNED, …": every event status, for messages.
std::string EventStatusList();

// SUCCESS, FAILED or COMPENSATED: nothing will change the event any more by itself.
constexpr bool IsTerminal(EventStatus s) {
  return s == EventStatus::kSuccess || s == EventStatus::kFailed || s == EventStatus::kCompensated;
}

}  // namespace dsync::events
