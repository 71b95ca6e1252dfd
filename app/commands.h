// The `dsync` subcommands. Each Run* function gets the parsed invocation, does its
// work and returns the process exit code; expected failures are thrown as
// dsync::Error subclasses and turned into a one-line message by main.
//
// Exit codes: 0 success / clean shutdown, 1 runtime failure (database, schema),
// 2 bad input (usage, config, URL).
#pragma once

#include <vector>

#include "app/cli.h"

namespace dsync::app {

const std::vector<CommandSpec>& Commands();

// Dispatches to the command named in `inv`. Throws dsync::Error.
int RunCommand(const Invocation& inv);

}  // namespace dsync::app
