// events/status.h: the one conversion between the status enums and the text the
// database stores. The expected texts are DESIGN.md's contract (CONTRACT: tables),
// spelled here on purpose: they must not change with the code.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "events/purge.h"
#include "events/status.h"

namespace dsync::events {
namespace {

TEST(EventStatus, TextIsTheContractsSpellingInItsOrder) {
  std::vector<std::string> texts;
  for (EventStatus s : kEventStatuses) texts.push_back(ToText(s));
  EXPECT_EQ(texts, (std::vector<std::string>{"PENDING", "ASSIGNED", "RUNNING", "SUCCESS", "FAILED", "COMPENSATING",
                                             "COMPENSATED"}));
  EXPECT_EQ(EventStatusList(), "PENDING, ASSIGNED, RUNNING, SUCCESS, FAILED, COMPENSATING, COMPENSATED");
}

TEST(StepStatus, TextIsTheContractsSpellingInItsOrder) {
  std::vector<std::string> texts;
  for (StepStatus s : kStepStatuses) texts.push_back(ToText(s));
  EXPECT_EQ(texts,
            (std::vector<std::string>{"PENDING", "EXECUTING", "SUCCESS", "FAILED", "COMPENSATING", "COMPENSATED"}));
}

TEST(EventStatus, ParseIsTheInverseOfToTextAndExact) {
  for (EventStatus s : kEventStatuses) EXPECT_EQ(ParseEventStatus(ToText(s)), s) << ToText(s);
  for (const char* bad : {"", "pending", "Pending", "PENDING ", "EXECUTING", "DONE"}) {
    EXPECT_EQ(ParseEventStatus(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(StoredEventStatus("RUNNING"), EventStatus::kRunning);
  EXPECT_THROW(StoredEventStatus("RUNNNING"), std::runtime_error);
}

TEST(StepStatus, ParseIsTheInverseOfToTextAndExact) {
  for (StepStatus s : kStepStatuses) EXPECT_EQ(ParseStepStatus(ToText(s)), s) << ToText(s);
  for (const char* bad : {"", "success", "ASSIGNED", "RUNNING", "SUCCESS\n"}) {
    EXPECT_EQ(ParseStepStatus(bad), std::nullopt) << bad;
  }
}

// The SQL spelling inside statement text is the same one text, quoted.
TEST(EventStatus, SqlLiteralIsTheQuotedText) {
  EXPECT_EQ(std::string(DSYNC_SQL_STATUS(PENDING)), "'" + ToText(EventStatus::kPending) + "'");
  EXPECT_EQ(std::string(DSYNC_SQL_STATUS(ASSIGNED)), "'" + ToText(EventStatus::kAssigned) + "'");
  EXPECT_EQ(std::string(DSYNC_SQL_STATUS(RUNNING)), "'" + ToText(EventStatus::kRunning) + "'");
  EXPECT_EQ(std::string(DSYNC_SQL_STATUS(EXECUTING)), "'" + ToText(StepStatus::kExecuting) + "'");
  EXPECT_EQ(std::string(DSYNC_SQL_STATUS(SUCCESS)), "'" + ToText(EventStatus::kSuccess) + "'");
  EXPECT_EQ(std::string(DSYNC_SQL_STATUS(FAILED)), "'" + ToText(EventStatus::kFailed) + "'");
  EXPECT_EQ(std::string(DSYNC_SQL_STATUS(COMPENSATING)), "'" + ToText(EventStatus::kCompensating) + "'");
  EXPECT_EQ(std::string(DSYNC_SQL_STATUS(COMPENSATED)), "'" + ToText(EventStatus::kCompensated) + "'");
  EXPECT_EQ(std::string("WHERE status = " DSYNC_SQL_STATUS(PENDING) " AND"), "WHERE status = 'PENDING' AND");
  EXPECT_EQ(std::string(DSYNC_SQL_IN_FLIGHT), "('ASSIGNED', 'RUNNING', 'COMPENSATING')");
  EXPECT_EQ(std::string(DSYNC_SQL_CLAIMED), "('RUNNING', 'COMPENSATING')");
  EXPECT_EQ(std::string(DSYNC_SQL_TERMINAL), "('SUCCESS', 'FAILED', 'COMPENSATED')");
}

TEST(EventStatus, TerminalAreSuccessFailedCompensated) {
  std::set<std::string> terminal;
  for (EventStatus s : kEventStatuses) {
    if (IsTerminal(s)) terminal.insert(ToText(s));
  }
  EXPECT_EQ(terminal, (std::set<std::string>{"SUCCESS", "FAILED", "COMPENSATED"}));
  EXPECT_EQ(std::set<std::string>(TerminalStatuses().begin(), TerminalStatuses().end()), terminal);
  EXPECT_TRUE(IsTerminalStatus("COMPENSATED"));
  EXPECT_FALSE(IsTerminalStatus("COMPENSATING"));
  EXPECT_FALSE(IsTerminalStatus("success"));
}

}  // namespace
}  // namespace dsync::events
