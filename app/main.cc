// Entry point of the `dsync` binary: parse, dispatch, and turn every expected
// failure into one line on stderr with a meaningful exit code.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "app/commands.h"
#include "core/error.h"
#include "storage/db_url.h"

int main(int argc, char** argv) {
  using namespace dsync;
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    app::Invocation inv = app::ParseArgs(args, app::Commands());
    return app::RunCommand(inv);
  } catch (const UsageError& e) {
    std::cerr << "dsync: " << storage::MaskPasswords(e.what()) << "\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << "dsync: " << storage::MaskPasswords(e.what()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "dsync: internal error: " << storage::MaskPasswords(e.what()) << "\n";
    return 1;
  }
}
