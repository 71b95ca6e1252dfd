// The byte form of relayed chunks (table/relay_codec.h): exact round trips, and every
// kind of damage refused with one line.
#include "table/relay_codec.h"

#include <gtest/gtest.h>

namespace dsync::table {
namespace {

RelayChunk Sample() {
  RelayChunk c;
  c.columns = {"id", "title", "blob"};
  c.key_columns = {"id"};
  c.lo = Row{"100"};
  c.hi = Row{"200"};
  c.rows = {Row{"101", "caf\xc3\xa9", std::nullopt}, Row{"102", "", std::string("00FF\0", 5)},
            Row{"150", std::string(70000, 'x'), "NULL"}};
  c.deletes = {Row{"103"}, Row{"199"}};
  return c;
}

TEST(RelayCodec, RoundTripsExactly) {
  const RelayChunk c = Sample();
  EXPECT_EQ(DecodeRelayChunk(EncodeRelayChunk(c)), c);

  RelayChunk open;  // no range ends, no rows, composite key
  open.columns = {"a", "b", "v"};
  open.key_columns = {"a", "b"};
  EXPECT_EQ(DecodeRelayChunk(EncodeRelayChunk(open)), open);
  open.hi = Row{std::nullopt, "x"};
  EXPECT_EQ(DecodeRelayChunk(EncodeRelayChunk(open)), open);
}

TEST(RelayCodec, NullEmptyAndTheTextNullStayDistinct) {
  RelayChunk c;
  c.columns = {"id", "v"};
  c.key_columns = {"id"};
  c.rows = {Row{"1", std::nullopt}, Row{"2", ""}, Row{"3", "NULL"}};
  const RelayChunk back = DecodeRelayChunk(EncodeRelayChunk(c));
  ASSERT_EQ(back.rows.size(), 3u);
  EXPECT_FALSE(back.rows[0][1].has_value());
  EXPECT_EQ(back.rows[1][1], std::optional<std::string>(""));
  EXPECT_EQ(back.rows[2][1], std::optional<std::string>("NULL"));
}

TEST(RelayCodec, EveryFlippedByteAndEveryCutIsRefused) {
  const std::string bytes = EncodeRelayChunk(Sample());
  for (size_t i = 0; i < bytes.size(); i += 97) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    EXPECT_THROW(DecodeRelayChunk(bad), RelayFormatError) << "flipped byte " << i;
  }
  for (size_t n : {size_t{0}, size_t{3}, size_t{9}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_THROW(DecodeRelayChunk(bytes.substr(0, n)), RelayFormatError) << "cut at " << n;
  }
  EXPECT_THROW(DecodeRelayChunk(bytes + "x"), RelayFormatError);
}

TEST(RelayCodec, MessagesNameTheFault) {
  const std::string bytes = EncodeRelayChunk(Sample());
  std::string flipped = bytes;
  flipped[20] ^= 1;
  try {
    DecodeRelayChunk(flipped);
    FAIL() << "no error";
  } catch (const RelayFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("relay chunk: checksum mismatch"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  try {
    DecodeRelayChunk("hello");
    FAIL() << "no error";
  } catch (const RelayFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("not a relay chunk"), std::string::npos) << e.what();
  }
}

// A frame whose checksum is right but whose counts lie (a hostile or buggy writer):
// refused without allocating what the count claims.
TEST(RelayCodec, CountsBeyondTheBytesAreRefused) {
  std::string body = "DSRC";
  body.push_back(1);                     // version
  body.push_back(1);                     // 1 column
  body.append("\x02id", 3);
  body.push_back(1);                     // 1 key column
  body.append("\x02id", 3);
  body.push_back(0);                     // flags
  body.append("\xff\xff\xff\xff\x0f", 5);  // ~4 billion rows
  const uint32_t crc = Crc32(body);
  std::string framed = body;
  for (int i = 0; i < 4; ++i) framed.push_back(static_cast<char>(crc >> (8 * i)));
  try {
    DecodeRelayChunk(framed);
    FAIL() << "no error";
  } catch (const RelayFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("row count 4294967295 exceeds the bytes that remain"), std::string::npos)
        << e.what();
  }
}

TEST(RelayCodec, RowsOfTheWrongWidthAreACallersBug) {
  RelayChunk c = Sample();
  c.rows.push_back(Row{"1"});
  EXPECT_THROW(EncodeRelayChunk(c), std::invalid_argument);
  c = Sample();
  c.deletes.push_back(Row{"1", "2"});
  EXPECT_THROW(EncodeRelayChunk(c), std::invalid_argument);
}

TEST(RelayCodec, Crc32IsZlibs) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32("56789", Crc32("1234")), 0xCBF43926u);
  EXPECT_EQ(Crc32(""), 0u);
}

}  // namespace
}  // namespace dsync::table
