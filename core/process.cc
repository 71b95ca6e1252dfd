#include "core/process.h"

#include <unistd.h>

namespace dsync {

std::string Hostname() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return host;
}

std::string HostAndPid() { return Hostname() + ":" + std::to_string(getpid()); }

}  // namespace dsync
