// `dsync verify` (app/verify_command.cc): its options and the command.
#pragma once

#include "app/cli.h"

namespace dsync::app {

// The command's spec for Commands().
CommandSpec VerifyCommandSpec();

// Exit 0 equal, 3 differences, 1 runtime failure; throws UsageError (exit 2).
int RunVerify(const Invocation& inv);

}  // namespace dsync::app
