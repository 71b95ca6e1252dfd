// Bundle files (table/bundle_file.h): a signed round trip, and a truncated, extended,
// altered, foreign-key or swapped-after-open bundle refused with one line.
#include "table/bundle_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "table/relay_codec.h"

namespace dsync::table {
namespace {

namespace fs = std::filesystem;

class BundleFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dsync-bundle-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    path_ = (dir_ / "b.dsb").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static RelayChunk Chunk(int from, int n) {
    RelayChunk c;
    c.columns = {"id", "v"};
    c.key_columns = {"id"};
    if (from > 0) c.lo = Row{std::to_string(from)};
    for (int i = from + 1; i <= from + n; ++i) c.rows.push_back(Row{std::to_string(i), "value " + std::to_string(i)});
    c.hi = Row{std::to_string(from + n)};
    return c;
  }

  void WriteSample(const std::string& key = "k3y-of-env-b") {
    BundleWriter w(path_, key);
    w.AddSection(EncodeRelayChunk(Chunk(0, 100)));
    w.AddSection(EncodeRelayChunk(Chunk(100, 50)));
    w.Finish({{"source", "env_a"}, {"table", "kb_doc"}, {"rows", 150}});
  }

  std::string Read() {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void Rewrite(const std::string& bytes) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string OpenError(const std::string& key = "k3y-of-env-b") {
    try {
      BundleReader::Open(path_, key);
    } catch (const BundleError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(BundleFileTest, RoundTrip) {
  WriteSample();
  EXPECT_FALSE(fs::exists(path_ + ".part"));
  BundleReader r = BundleReader::Open(path_, "k3y-of-env-b");
  EXPECT_EQ(r.manifest()["source"], "env_a");
  EXPECT_EQ(r.manifest()["format"], 1);
  ASSERT_EQ(r.sections(), 2u);
  EXPECT_EQ(DecodeRelayChunk(r.Section(0)), Chunk(0, 100));
  EXPECT_EQ(DecodeRelayChunk(r.Section(1)), Chunk(100, 50));
  EXPECT_EQ(DecodeRelayChunk(r.Section(0)), Chunk(0, 100));  // any order, again
}

TEST_F(BundleFileTest, AnUnfinishedWriterLeavesNothing) {
  {
    BundleWriter w(path_, "k");
    w.AddSection(EncodeRelayChunk(Chunk(0, 10)));
  }
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_FALSE(fs::exists(path_ + ".part"));
}

TEST_F(BundleFileTest, TruncatedIsRefused) {
  WriteSample();
  const std::string bytes = Read();
  for (size_t cut : {bytes.size() - 1, bytes.size() - 33, bytes.size() / 2, size_t{40}}) {
    Rewrite(bytes.substr(0, cut));
    EXPECT_NE(OpenError().find("truncated"), std::string::npos) << "cut at " << cut << ": " << OpenError();
  }
  Rewrite(bytes + "more");
  EXPECT_NE(OpenError().find("truncated or extended"), std::string::npos) << OpenError();
  Rewrite(bytes.substr(0, 10));
  EXPECT_NE(OpenError().find("not a dsync bundle"), std::string::npos) << OpenError();
}

TEST_F(BundleFileTest, AlteredIsRefused) {
  WriteSample();
  const std::string bytes = Read();
  // A byte of a row, of the manifest, and of the trailer's signed region.
  for (size_t at : {size_t{60}, bytes.size() - 80, bytes.size() - 40}) {
    std::string bad = bytes;
    bad[at] = static_cast<char>(bad[at] ^ 0x01);
    Rewrite(bad);
    const std::string err = OpenError();
    EXPECT_TRUE(err.find("signature mismatch") != std::string::npos || err.find("truncated") != std::string::npos)
        << "byte " << at << ": " << err;
  }
  std::string bad = bytes;
  bad[60] = static_cast<char>(bad[60] ^ 0x01);
  Rewrite(bad);
  EXPECT_EQ(OpenError(), "bundle " + path_ + ": signature mismatch: altered after signing, or signed with another key");
}

TEST_F(BundleFileTest, AnotherKeyIsRefused) {
  WriteSample("key-one");
  EXPECT_NE(OpenError("key-two").find("signature mismatch"), std::string::npos);
  EXPECT_NE(OpenError("").find("no signing key"), std::string::npos);
  EXPECT_THROW(BundleWriter(path_, ""), BundleError);
}

TEST_F(BundleFileTest, ASectionChangedAfterOpenIsRefused) {
  WriteSample();
  BundleReader r = BundleReader::Open(path_, "k3y-of-env-b");
  std::string bytes = Read();
  bytes[60] = static_cast<char>(bytes[60] ^ 0x01);  // inside section 0, after the check
  Rewrite(bytes);
  try {
    r.Section(0);
    FAIL() << "no error";
  } catch (const BundleError& e) {
    EXPECT_NE(std::string(e.what()).find("section 0 does not match its manifest entry"), std::string::npos) << e.what();
  }
  EXPECT_EQ(DecodeRelayChunk(r.Section(1)), Chunk(100, 50));
}

}  // namespace
}  // namespace dsync::table
