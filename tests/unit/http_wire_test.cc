// Unit tests of the HTTP request head parser and the chunked decoder (api/http_wire.h):
// what is accepted, what each malformed input is answered with.
#include "api/http_wire.h"

#include <string>

#include <gtest/gtest.h>

#include "api/http_text.h"

namespace dsync::api {
namespace {

int StatusOf(const std::string& head) {
  try {
    ParseRequestHead(head);
  } catch (const HttpError& e) {
    return e.status;
  }
  return 0;
}

TEST(HttpWireTest, ParsesARequestHead) {
  HttpRequestHead h = ParseRequestHead(
      "POST /v1/events?x=1 HTTP/1.1\r\nHost: localhost:8080\r\ncontent-length: 12\r\nX-A:  padded \r\n\r\n");
  EXPECT_EQ(h.method, "POST");
  EXPECT_EQ(h.target, "/v1/events?x=1");
  EXPECT_EQ(h.minor_version, 1);
  EXPECT_EQ(h.content_length, 12);
  EXPECT_FALSE(h.chunked);
  EXPECT_TRUE(h.keep_alive);
  EXPECT_TRUE(h.has_body());
  ASSERT_NE(h.Find("HOST"), nullptr);
  EXPECT_EQ(*h.Find("host"), "localhost:8080");
  EXPECT_EQ(*h.Find("x-a"), "padded");
  EXPECT_EQ(h.Find("Authorization"), nullptr);
}

TEST(HttpWireTest, KeepAliveFollowsVersionAndConnection) {
  EXPECT_FALSE(ParseRequestHead("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);
  EXPECT_FALSE(ParseRequestHead("GET / HTTP/1.0\r\n\r\n").keep_alive);
  EXPECT_TRUE(ParseRequestHead("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
  EXPECT_TRUE(ParseRequestHead("GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n").expect_continue);
  EXPECT_TRUE(ParseRequestHead("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").chunked);
}

TEST(HttpWireTest, MalformedHeadsAreRefused) {
  EXPECT_EQ(StatusOf("GET /\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET  / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET http://x/ HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(StatusOf("G\x01T / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nNo colon\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: 9999999999999999999\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nExpect: something\r\n\r\n"), 417);
  std::string many = "GET / HTTP/1.1\r\n";
  for (size_t i = 0; i <= kMaxHeaderCount; ++i) many += "X-" + std::to_string(i) + ": y\r\n";
  EXPECT_EQ(StatusOf(many + "\r\n"), 431);
  // Identical repeated lengths are one length.
  EXPECT_EQ(ParseRequestHead("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n").content_length, 3);
}

TEST(HttpWireTest, ChunkedBodiesDecodeAcrossArbitrarySplits) {
  const std::string wire = "4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nTrailer: x\r\n\r\nNEXT";
  for (size_t step = 1; step <= wire.size(); ++step) {
    ChunkedDecoder d;
    std::string in, out;
    bool done = false;
    for (size_t i = 0; i < wire.size() && !done; i += step) {
      in += wire.substr(i, step);
      done = d.Feed(in, out);
    }
    ASSERT_TRUE(done) << step;
    EXPECT_EQ(out, "Wikipedia in\r\n\r\nchunks.") << step;
    EXPECT_EQ(in, std::string("NEXT").substr(0, in.size())) << step;
  }
}

TEST(HttpWireTest, MalformedChunksAreRefused) {
  for (const std::string& wire : {std::string("zz\r\n"), std::string("4\r\nWikiXX"), std::string("fffffffffffffffff\r\n"),
                                 std::string(2000, '1')}) {
    ChunkedDecoder d;
    std::string in = wire, out;
    EXPECT_THROW(d.Feed(in, out), HttpError) << wire.substr(0, 20);
  }
}

TEST(HttpWireTest, ResponseHeadHasStatusReasonAndHeaders) {
  EXPECT_EQ(ResponseHead(421, {{"Content-Length", "0"}}), "HTTP/1.1 421 Misdirected Request\r\nContent-Length: 0\r\n\r\n");
  EXPECT_STREQ(ReasonPhrase(411), "Length Required");
}

// What a client without the token sees of an error text: no host, port, user or schema.
TEST(HttpWireTest, MaskEndpointsHidesHostsPortsUsersAndSchemas) {
  const std::string texts[] = {
      "mysql://sync_admin:***@db-7.corp.internal:3307,db-8.corp.internal:3307/billing_prod?ssl=1: no host is ready",
      "Access denied for user 'sync_admin'@'10.1.2.3' (using password: YES)",
      "Can't connect to server on 'db-7.corp.internal' (115)",
      "Unknown database 'billing_prod'",
      "Table 'billing_prod.invoice' doesn't exist",
      "cannot reach db-7.corp.internal:3307 or 10.1.2.3:3306 or [fd00::7]:3306",
  };
  for (const std::string& text : texts) {
    const std::string masked = MaskEndpoints(text);
    for (const char* secret : {"db-7", "corp.internal", "3307", "3306", "sync_admin", "10.1.2.3", "billing_prod", "fd00"}) {
      EXPECT_EQ(masked.find(secret), std::string::npos) << text << " -> " << masked;
    }
  }
  // What is not an endpoint stays.
  EXPECT_EQ(MaskEndpoints("step s1 failed at 13:22:05: duplicate key"), "step s1 failed at 13:22:05: duplicate key");
  EXPECT_EQ(MaskEndpoints("Unknown database 'x'"), "Unknown database '***'");
}

}  // namespace
}  // namespace dsync::api
