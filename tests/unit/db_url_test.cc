// Unit tests of the database URL parser: accepted forms, percent-decoding,
// options, one-line errors, and that a password never shows up in messages.
#include "storage/db_url.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

namespace dsync::storage {
namespace {

std::string ErrorOf(const std::string& url) {
  try {
    DbUrl::Parse(url);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(DbUrl, ParsesFullForm) {
  DbUrl u = DbUrl::Parse("mysql://dsync:secret@db.example:3307/kb_sync");
  EXPECT_EQ(u.user, "dsync");
  EXPECT_EQ(u.password, "secret");
  ASSERT_EQ(u.hosts.size(), 1u);
  EXPECT_EQ(u.hosts[0].name, "db.example");
  EXPECT_EQ(u.hosts[0].port, 3307);
  EXPECT_EQ(u.order, HostOrder::kFailover);
  EXPECT_EQ(u.schema, "kb_sync");
  EXPECT_EQ(u.socket, "");
  EXPECT_EQ(u.pool_size, 8);
}

TEST(DbUrl, DefaultsPortAndAllowsEmptyPassword) {
  DbUrl u = DbUrl::Parse("mysql://root@localhost/dsync");
  EXPECT_EQ(u.hosts.at(0).port, 3306);
  EXPECT_EQ(u.password, "");
  EXPECT_EQ(u.Masked(), "mysql://root@localhost:3306/dsync");
}

TEST(DbUrl, PercentDecodesUserPasswordAndSchema) {
  DbUrl u = DbUrl::Parse("mysql://us%65r:p%40ss%3Aw%2Fd%25@127.0.0.1:3306/my%2Ddb");
  EXPECT_EQ(u.user, "user");
  EXPECT_EQ(u.password, "p@ss:w/d%");
  EXPECT_EQ(u.schema, "my-db");
}

TEST(DbUrl, ParsesOptions) {
  DbUrl u = DbUrl::Parse(
      "mysql://a:b@localhost/s?socket=%2Ftmp%2Fm.sock&pool_size=3&connect_timeout_ms=1500"
      "&read_timeout_ms=7000&write_timeout_ms=9000");
  EXPECT_EQ(u.socket, "/tmp/m.sock");
  EXPECT_EQ(u.pool_size, 3);
  EXPECT_EQ(u.connect_timeout.count(), 1500);
  EXPECT_EQ(u.read_timeout.count(), 7000);
  EXPECT_EQ(u.write_timeout.count(), 9000);
  EXPECT_EQ(u.Masked(), "mysql://a:***@localhost:3306/s?socket=/tmp/m.sock");
}

TEST(DbUrl, ParsesBracketedIpv6Host) {
  DbUrl u = DbUrl::Parse("mysql://a:b@[::1]:3310/s");
  EXPECT_EQ(u.hosts.at(0).name, "::1");
  EXPECT_EQ(u.hosts.at(0).port, 3310);
  EXPECT_EQ(u.Masked(), "mysql://a:***@[::1]:3310/s");
}

TEST(DbUrl, ParsesHostListInOrder) {
  DbUrl u = DbUrl::Parse("mysql://u:p@127.0.0.1:4001,db-2.example:4002,db3/s");
  EXPECT_EQ(u.hosts, (std::vector<DbHost>{{"127.0.0.1", 4001}, {"db-2.example", 4002}, {"db3", 3306}}));
  EXPECT_EQ(u.Masked(), "mysql://u:***@127.0.0.1:4001,db-2.example:4002,db3:3306/s");
}

TEST(DbUrl, ParsesIpv6InAHostList) {
  DbUrl u = DbUrl::Parse("mysql://u:p@[::1]:4001,[fe80::1:2]:4002,[::ffff:127.0.0.1],10.0.0.1:4004/s");
  EXPECT_EQ(u.hosts, (std::vector<DbHost>{{"::1", 4001}, {"fe80::1:2", 4002}, {"::ffff:127.0.0.1", 3306},
                                          {"10.0.0.1", 4004}}));
  EXPECT_EQ(u.Masked(), "mysql://u:***@[::1]:4001,[fe80::1:2]:4002,[::ffff:127.0.0.1]:3306,10.0.0.1:4004/s");
}

TEST(DbUrl, PasswordMayContainColonsAndCommasAndEncodedAt) {
  DbUrl u = DbUrl::Parse("mysql://u:a:b,c%40d,:@h1:1,h2:2/s");
  EXPECT_EQ(u.user, "u");
  EXPECT_EQ(u.password, "a:b,c@d,:");
  EXPECT_EQ(u.hosts, (std::vector<DbHost>{{"h1", 1}, {"h2", 2}}));
  EXPECT_EQ(u.Masked().find("a:b"), std::string::npos);
  // A literal '@' in the password still parses: the host list never holds one.
  EXPECT_EQ(DbUrl::Parse("mysql://u:p@ss@h1:1/s").password, "p@ss");
}

TEST(DbUrl, ParsesOrderOption) {
  EXPECT_EQ(DbUrl::Parse("mysql://u:p@h1,h2/s?order=random").order, HostOrder::kRandom);
  EXPECT_EQ(DbUrl::Parse("mysql://u:p@h1,h2/s?order=failover").order, HostOrder::kFailover);
  EXPECT_EQ(DbUrl::Parse("mysql://u:p@h1,h2/s?order=random").Masked(),
            "mysql://u:***@h1:3306,h2:3306/s?order=random");
}

TEST(DbUrl, UnmaskedRoundTripsThroughParse) {
  DbUrl u = DbUrl::Parse("mysql://us%40er:a:b,c%40d%2F%3F@[::1]:1,h2:2/s?order=random");
  DbUrl again = DbUrl::Parse(u.Unmasked());
  EXPECT_EQ(again.user, "us@er");
  EXPECT_EQ(again.password, "a:b,c@d/?");
  EXPECT_EQ(again.hosts, u.hosts);
  EXPECT_EQ(again.order, HostOrder::kRandom);
  EXPECT_EQ(again.schema, "s");
}

TEST(DbUrl, MaskedNeverContainsPassword) {
  DbUrl u = DbUrl::Parse("mysql://dsync:TopSecret99@h:1/s");
  EXPECT_EQ(u.Masked().find("TopSecret99"), std::string::npos);
  EXPECT_NE(u.Masked().find(":***@"), std::string::npos);
}

TEST(DbUrl, WithSchemaKeepsEverythingElse) {
  DbUrl u = DbUrl::Parse("mysql://a:b@h:1234,g:1235/one?pool_size=2").WithSchema("two");
  EXPECT_EQ(u.schema, "two");
  EXPECT_EQ(u.hosts.size(), 2u);
  EXPECT_EQ(u.hosts.at(0).port, 1234);
  EXPECT_EQ(u.pool_size, 2);
}

struct BadCase {
  const char* url;
  const char* expected_fragment;
};

class DbUrlRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(DbUrlRejects, WithOneLineReasonAndNoPassword) {
  std::string err = ErrorOf(GetParam().url);
  ASSERT_FALSE(err.empty()) << "accepted: " << GetParam().url;
  EXPECT_NE(err.find(GetParam().expected_fragment), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  EXPECT_EQ(err.find("hunter2"), std::string::npos) << err;
  EXPECT_EQ(err.rfind("bad database URL: ", 0), 0u) << err;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DbUrlRejects,
    ::testing::Values(BadCase{"", "empty"},
                      BadCase{"postgres://u:hunter2@h/s", "unsupported scheme 'postgres'"},
                      BadCase{"u:hunter2@h/s", "missing mysql:// scheme"},
                      BadCase{"mysql://u:hunter2@h", "missing /schema"},
                      BadCase{"mysql://u:hunter2@h/", "missing schema"},
                      BadCase{"mysql://h:3306/s", "missing user@"},
                      BadCase{"mysql://:hunter2@h/s", "missing user name"},
                      BadCase{"mysql://u:hunter2@:3306/s", "missing host"},
                      BadCase{"mysql://u:hunter2@h:0/s", "port must be a number from 1 to 65535"},
                      BadCase{"mysql://u:hunter2@h:70000/s", "port must be"},
                      BadCase{"mysql://u:hunter2@h:33x6/s", "port must be"},
                      BadCase{"mysql://u:hunter2@h:/s", "port must be"},
                      BadCase{"mysql://u:hunter2@[::1/s", "unclosed ["},
                      BadCase{"mysql://u:hunter2@h/s?colour=blue", "unknown option 'colour'"},
                      BadCase{"mysql://u:hunter2@h/s?pool_size=0", "pool_size must be"},
                      BadCase{"mysql://u:hunter2@h/s?pool_size", "has no value"},
                      BadCase{"mysql://u:hunter2@h/s?socket=", "socket option is empty"},
                      BadCase{"mysql://u:hunter2%zz@h/s", "bad %-escape in password"},
                      BadCase{"mysql://u:hunter2%4@h/s", "truncated %-escape"},
                      BadCase{"mysql://u:hunter2@h/a/b", "contains '/'"},
                      // host lists
                      BadCase{"mysql://u:hunter2@/s", "missing host"},
                      BadCase{"mysql://u:hunter2@,/s", "empty entry in the host list"},
                      BadCase{"mysql://u:hunter2@h1:1,/s", "empty entry in the host list"},
                      BadCase{"mysql://u:hunter2@,h1:1/s", "empty entry in the host list"},
                      BadCase{"mysql://u:hunter2@h1:1,,h2:2/s", "empty entry in the host list"},
                      BadCase{"mysql://u:hunter2@h1:1,h2:0/s", "port must be a number from 1 to 65535"},
                      BadCase{"mysql://u:hunter2@h1:1,h2:65536/s", "port must be"},
                      BadCase{"mysql://u:hunter2@h1:1,h2:x/s", "port must be"},
                      BadCase{"mysql://u:hunter2@h1:1,h2:/s", "port must be"},
                      BadCase{"mysql://u:hunter2@h1:1,:2/s", "missing host"},
                      BadCase{"mysql://u:hunter2@h1:1,h1:1/s", "host h1:1 is listed twice"},
                      BadCase{"mysql://u:hunter2@H1:1,h1:1/s", "host h1:1 is listed twice"},
                      BadCase{"mysql://u:hunter2@h1,h1:3306/s", "host h1:3306 is listed twice"},
                      BadCase{"mysql://u:hunter2@[::1]:5,[::1]:5/s", "host [::1]:5 is listed twice"},
                      BadCase{"mysql://u:hunter2@::1/s", "must be in brackets"},
                      BadCase{"mysql://u:hunter2@h1,::1:3306/s", "must be in brackets"},
                      BadCase{"mysql://u:hunter2@[]:1/s", "is not an IPv6 address"},
                      BadCase{"mysql://u:hunter2@[db.example]:1/s", "is not an IPv6 address"},
                      BadCase{"mysql://u:hunter2@[::1]x/s", "unexpected text after ]"},
                      BadCase{"mysql://u:hunter2@h1,h%32/s", "bad character in host"},
                      BadCase{"mysql://u:hunter2@h1;h2/s", "bad character in host"},
                      BadCase{"mysql://u:hunter2@h1 ,h2/s", "bad character in host"},
                      BadCase{"mysql://u:hunter2@h1,h2/s?order=nearest", "order must be failover or random"},
                      BadCase{"mysql://u:hunter2@h1,h2/s?socket=%2Ftmp%2Fs", "socket option needs a single host"},
                      // a password with ':' and ',' is still masked in every message
                      BadCase{"mysql://u:hunter2:,x@h1:1,h1:1/s", "listed twice"},
                      BadCase{"mysql://u:,hunter2@h1,h2:99999/s", "port must be"}));

TEST(MaskPasswords, MasksUrlsInsideText) {
  EXPECT_EQ(MaskPasswords("cannot reach mysql://u:hunter2@h:1/s today"),
            "cannot reach mysql://u:***@h:1/s today");
  EXPECT_EQ(MaskPasswords("no url here: a:b@c"), "no url here: a:b@c");
  EXPECT_EQ(MaskPasswords("mysql://u@h/s"), "mysql://u@h/s");
  EXPECT_EQ(MaskPasswords("to mysql://u:a:b,c@h1:1,h2:2/s failed"), "to mysql://u:***@h1:1,h2:2/s failed");
}

}  // namespace
}  // namespace dsync::storage
