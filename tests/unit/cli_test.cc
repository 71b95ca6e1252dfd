// Unit tests of the command-line parser: options per command, values, errors.
#include "app/cli.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dsync::app {
namespace {

const std::vector<CommandSpec> kCommands = {
    {"node", "run a node", "", 0, 0, {{"capacity", true, ""}, {"json", false, ""}}},
    {"drain", "drain a node", "ADDRESS", 1, 1, {}},
};

Invocation Parse(std::vector<std::string> argv) { return ParseArgs(argv, kCommands); }

std::string ErrorOf(std::vector<std::string> argv) {
  try {
    Parse(std::move(argv));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Cli, ParsesValuesFlagsAndCommonOptions) {
  Invocation inv = Parse({"node", "--capacity", "4", "--json", "--db=mysql://a@b/c", "--log-level", "debug"});
  EXPECT_EQ(inv.command, "node");
  EXPECT_EQ(inv.Get("capacity"), "4");
  EXPECT_TRUE(inv.Flag("json"));
  EXPECT_EQ(inv.Get("db"), "mysql://a@b/c");
  EXPECT_EQ(inv.Get("log-level"), "debug");
  EXPECT_FALSE(inv.Get("config").has_value());
}

TEST(Cli, HelpAndVersion) {
  EXPECT_TRUE(Parse({}).help);
  EXPECT_TRUE(Parse({"--help"}).help);
  EXPECT_TRUE(Parse({"--version"}).version);
  Invocation inv = Parse({"node", "--help"});
  EXPECT_TRUE(inv.help);
  EXPECT_EQ(inv.command, "node");
  EXPECT_NE(CommandHelp(kCommands[0]).find("--capacity VALUE"), std::string::npos);
  EXPECT_NE(Usage(kCommands).find("drain ADDRESS"), std::string::npos);
}

TEST(Cli, PositionalArguments) {
  EXPECT_EQ(Parse({"drain", "10.0.0.1:7001"}).args, std::vector<std::string>{"10.0.0.1:7001"});
  EXPECT_NE(ErrorOf({"drain"}).find("needs ADDRESS"), std::string::npos);
  EXPECT_NE(ErrorOf({"drain", "a:1", "b:2"}).find("unexpected argument 'b:2'"), std::string::npos);
  EXPECT_NE(ErrorOf({"node", "extra"}).find("unexpected argument 'extra'"), std::string::npos);
}

TEST(Cli, Errors) {
  EXPECT_NE(ErrorOf({"launch"}).find("unknown command 'launch'"), std::string::npos);
  EXPECT_NE(ErrorOf({"node", "--capacty", "3"}).find("unknown option --capacty for 'dsync node'"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"node", "--capacity"}).find("--capacity needs a value"), std::string::npos);
  EXPECT_NE(ErrorOf({"node", "--json=yes"}).find("--json takes no value"), std::string::npos);
}

TEST(Cli, IntegerOptions) {
  EXPECT_EQ(ParseIntOption("capacity", "12", 1, 100), 12);
  for (const char* bad : {"0", "101", "-1", "1.5", "", "12abc", "99999999999"}) {
    EXPECT_THROW(ParseIntOption("capacity", bad, 1, 100), UsageError) << bad;
  }
}

TEST(Cli, HostPort) {
  EXPECT_NO_THROW(CheckHostPort("node-address", "10.0.0.5:7001"));
  EXPECT_NO_THROW(CheckHostPort("node-address", "worker-3.example:65535"));
  EXPECT_NO_THROW(CheckHostPort("node-address", "[::1]:7001"));
  for (const char* bad : {"10.0.0.5", ":7001", "host:0", "host:x", "a b:1", "host:70000"}) {
    EXPECT_THROW(CheckHostPort("node-address", bad), UsageError) << bad;
  }
  EXPECT_THROW(CheckHostPort("node-address", std::string(130, 'h') + ":1"), UsageError);
}

}  // namespace
}  // namespace dsync::app
