// Facts about this process that several components put into the database to say who
// wrote a row: heartbeat metadata, lease owner ids, migration records.
//
// Thread safety: reentrant.
#pragma once

#include <string>

namespace dsync {

// This machine's host name ("" if it cannot be read).
std::string Hostname();
// "host:pid": this process among all processes of the deployment.
std::string HostAndPid();

}  // namespace dsync
