// A bundle: the rows a sync would move, as one signed file, for links between
// environments that pass only files (`dsync bundle export` / `import`,
// `dsync verify --bundle`).
//
//   table::BundleWriter w(path, key);              // writes path + ".part"
//   w.AddSection(table::EncodeRelayChunk(chunk));   // any number, in order
//   w.Finish(manifest);                             // signs, renames to path
//
//   table::BundleReader r = table::BundleReader::Open(path, key);  // verifies first
//   for (size_t i = 0; i < r.sections(); ++i) Apply(table::DecodeRelayChunk(r.Section(i)));
//
// Layout (integers little-endian):
//   "DSYNCBUNDLE" u8 version(1) u32 0                      header, 16 bytes
//   'C' u64 n, n bytes                                     a section (a relay chunk)
//   ...
//   'M' u64 n, n bytes                                     the manifest, JSON
//   'S' u64 manifest_offset u64 signed_length               trailer
//   32 bytes HMAC-SHA256(key, every byte before them)       signature
// The writer adds to the manifest "format": 1 and "sections": [{"offset", "bytes",
// "sha256"}, ...]; the reader checks the signature over the whole file before it trusts
// a byte of it, then each section's SHA-256 (from the signed manifest) as it reads it,
// so a file changed after Open() is refused too.
//
// Faults, each a BundleError of one line naming the file and the fault:
//   not a bundle ("bad header"), "truncated" (the file ends before its trailer, or its
//   trailer does not describe this file's length: cut short or extended),
//   "signature mismatch: altered after signing, or signed with another key",
//   "unsupported bundle format 2", a manifest that is not JSON, "section 3 does not
//   match its manifest entry". A bundle being written is `path`.part until Finish().
//
// Thread safety: a writer or reader belongs to one thread.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsync::table {

class BundleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr uint8_t kBundleFormat = 1;

class BundleWriter {
 public:
  // Throws BundleError (empty key, cannot create the file).
  BundleWriter(std::string path, std::string key);
  ~BundleWriter();  // an unfinished bundle's .part file is removed
  BundleWriter(const BundleWriter&) = delete;
  BundleWriter& operator=(const BundleWriter&) = delete;

  void AddSection(std::string_view bytes);
  // Writes the manifest (an object; "format" and "sections" are the writer's), the
  // trailer and the signature, and renames the file into place. Throws BundleError.
  void Finish(nlohmann::json manifest);
  uint64_t bytes_written() const { return offset_; }

 private:
  void Write(std::string_view bytes);

  std::string path_;
  std::string key_;
  std::ofstream out_;
  uint64_t offset_ = 0;
  nlohmann::json sections_ = nlohmann::json::array();
  bool finished_ = false;
  struct Mac;
  std::unique_ptr<Mac> mac_;
};

class BundleReader {
 public:
  // Verifies the header, the trailer and the signature, and parses the manifest.
  // Throws BundleError.
  static BundleReader Open(const std::string& path, const std::string& key);

  const nlohmann::json& manifest() const { return manifest_; }
  size_t sections() const { return manifest_["sections"].size(); }
  // The i-th section's bytes, checked against the manifest's SHA-256. Throws BundleError.
  std::string Section(size_t i);

 private:
  BundleReader() = default;
  std::string path_;
  std::ifstream in_;
  uint64_t manifest_offset_ = 0;
  nlohmann::json manifest_;
};

// Hex SHA-256 of `bytes` (manifest fingerprints, section checks).
std::string Sha256Hex(std::string_view bytes);

}  // namespace dsync::table
