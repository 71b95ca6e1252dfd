// The benchmarks' main(): logging at warn, then `body`, with every failure turned into
// one line on stderr ("NAME: message") and an exit code: 2 for bad arguments
// (UsageError), 1 for anything else.
//
//   int main(int argc, char** argv) {
//     return dsync::bench::BenchMain("dsync_load_bench", [&] { return Run(ParseArgs(argc, argv)); });
//   }
#pragma once

#include <exception>
#include <iostream>

#include "core/error.h"
#include "core/log.h"

namespace dsync::bench {

template <class Body>
int BenchMain(const char* name, Body body) {
  try {
    SetupLogging("warn", "bench");
    return body();
  } catch (const UsageError& e) {
    std::cerr << name << ": " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << '\n';
    return 1;
  }
}

}  // namespace dsync::bench
