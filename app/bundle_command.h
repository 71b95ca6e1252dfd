// `dsync bundle export|import` and `dsync verify --bundle FILE`: app/bundle_command.cc,
// table/bundle.h, docs/relay.md "Bundles".
#pragma once

#include "app/cli.h"

namespace dsync::app {

CommandSpec BundleCommandSpec();
int RunBundle(const Invocation& inv);
// `dsync verify --bundle FILE [--target DS]`: exit 0 equal, 3 different, 2 a refused bundle.
int RunVerifyBundle(const Invocation& inv);

}  // namespace dsync::app
