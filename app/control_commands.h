// `dsync pause`, `dsync resume`, `dsync topics` and `dsync schedules` (issue 37;
// app/control_commands.cc): their specs for Commands() and the commands.
#pragma once

#include <vector>

#include "app/cli.h"

namespace dsync::app {

std::vector<CommandSpec> ControlCommandSpecs();

int RunPause(const Invocation& inv);
int RunResume(const Invocation& inv);
int RunTopics(const Invocation& inv);
int RunSchedules(const Invocation& inv);

}  // namespace dsync::app
