// A node as the event table knows it: its address within its service. Two services may
// each run a node at the same address; each node sees only its own service's events
// (docs/event-lifecycle.md, "Services").
#pragma once

#include <string>

namespace dsync::events {

struct NodeKey {
  std::string service;
  std::string address;
};

}  // namespace dsync::events
