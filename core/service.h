// The default service name: the default of config key `service` (config/settings.h)
// and what every Options struct's `service` field starts as, written once here. Nodes,
// dispatchers and events of one service work together; another service's are left
// alone (docs/event-lifecycle.md "Services"). The SQL migrations that added the column
// (V014) hold the same text as the column's default.
#pragma once

namespace dsync {

inline constexpr char kDefaultService[] = "kbs-sync";

}  // namespace dsync
