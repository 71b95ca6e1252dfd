#include "table/bundle_file.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <Poco/DigestEngine.h>
#include <Poco/HMACEngine.h>
#include <Poco/SHA2Engine.h>

namespace dsync::table {

// Poco's HMACEngine wants the hash's block and digest sizes as members.
class BundleSha256 : public Poco::SHA2Engine {
 public:
  enum { BLOCK_SIZE = 64, DIGEST_SIZE = 32 };
  BundleSha256() : Poco::SHA2Engine(Poco::SHA2Engine::SHA_256) {}
};

namespace {

constexpr std::string_view kHeaderMagic = "DSYNCBUNDLE";
constexpr size_t kHeaderBytes = 16;
constexpr size_t kSigBytes = 32;
constexpr size_t kTrailerBytes = 1 + 8 + 8;  // 'S', manifest_offset, signed_length
constexpr size_t kFrameHead = 1 + 8;         // kind, length

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

std::string Frame(char kind, uint64_t n) {
  std::string head(1, kind);
  PutU64(head, n);
  return head;
}

std::string Digest(Poco::DigestEngine& e) {
  const Poco::DigestEngine::Digest& d = e.digest();
  return std::string(d.begin(), d.end());
}

}  // namespace

struct BundleWriter::Mac {
  explicit Mac(const std::string& key) : hmac(key) {}
  Poco::HMACEngine<BundleSha256> hmac;
};

std::string Sha256Hex(std::string_view bytes) {
  BundleSha256 e;
  e.update(bytes.data(), bytes.size());
  return Poco::DigestEngine::digestToHex(e.digest());
}

BundleWriter::BundleWriter(std::string path, std::string key) : path_(std::move(path)), key_(std::move(key)) {
  if (key_.empty()) throw BundleError("bundle " + path_ + ": no signing key (config bundle.key)");
  mac_ = std::make_unique<Mac>(key_);
  out_.open(path_ + ".part", std::ios::binary | std::ios::trunc);
  if (!out_) throw BundleError("bundle " + path_ + ": cannot create " + path_ + ".part");
  std::string header(kHeaderMagic);
  header.push_back(static_cast<char>(kBundleFormat));
  header.append(4, '\0');
  Write(header);
}

BundleWriter::~BundleWriter() {
  if (!finished_) {
    out_.close();
    std::error_code ec;
    std::filesystem::remove(path_ + ".part", ec);
  }
}

void BundleWriter::Write(std::string_view bytes) {
  out_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out_) throw BundleError("bundle " + path_ + ": write failed at byte " + std::to_string(offset_));
  mac_->hmac.update(bytes.data(), bytes.size());
  offset_ += bytes.size();
}

void BundleWriter::AddSection(std::string_view bytes) {
  const uint64_t at = offset_;
  Write(Frame('C', bytes.size()));
  Write(bytes);
  sections_.push_back({{"offset", at}, {"bytes", bytes.size()}, {"sha256", Sha256Hex(bytes)}});
}

void BundleWriter::Finish(nlohmann::json manifest) {
  if (!manifest.is_object()) throw BundleError("bundle " + path_ + ": the manifest must be an object");
  manifest["format"] = kBundleFormat;
  manifest["sections"] = std::move(sections_);
  const std::string text = manifest.dump();
  const uint64_t manifest_offset = offset_;
  Write(Frame('M', text.size()));
  Write(text);
  std::string trailer(1, 'S');
  PutU64(trailer, manifest_offset);
  PutU64(trailer, offset_ + kTrailerBytes);  // the signed length: every byte but the signature
  Write(trailer);
  const std::string sig = Digest(mac_->hmac);
  out_.write(sig.data(), static_cast<std::streamsize>(sig.size()));
  out_.flush();
  if (!out_) throw BundleError("bundle " + path_ + ": write failed at its signature");
  out_.close();
  std::error_code ec;
  std::filesystem::rename(path_ + ".part", path_, ec);
  if (ec) throw BundleError("bundle " + path_ + ": cannot rename " + path_ + ".part: " + ec.message());
  finished_ = true;
}

BundleReader BundleReader::Open(const std::string& path, const std::string& key) {
  const std::string name = "bundle " + path + ": ";
  if (key.empty()) throw BundleError(name + "no signing key (config bundle.key)");
  BundleReader r;
  r.path_ = path;
  r.in_.open(path, std::ios::binary);
  if (!r.in_) throw BundleError(name + "cannot open it");
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw BundleError(name + "cannot read its size: " + ec.message());

  std::array<char, kHeaderBytes> header{};
  r.in_.read(header.data(), header.size());
  if (!r.in_ || std::string_view(header.data(), kHeaderMagic.size()) != kHeaderMagic) {
    throw BundleError(name + "not a dsync bundle (bad header)");
  }
  if (static_cast<uint8_t>(header[kHeaderMagic.size()]) != kBundleFormat) {
    throw BundleError(name + "unsupported bundle format " +
                      std::to_string(static_cast<uint8_t>(header[kHeaderMagic.size()])));
  }
  if (size < kHeaderBytes + kTrailerBytes + kSigBytes) {
    throw BundleError(name + "truncated (" + std::to_string(size) + " bytes, shorter than an empty bundle)");
  }
  std::array<char, kTrailerBytes + kSigBytes> tail{};
  r.in_.seekg(static_cast<std::streamoff>(size - tail.size()));
  r.in_.read(tail.data(), tail.size());
  const uint64_t manifest_offset = GetU64(tail.data() + 1);
  const uint64_t signed_length = GetU64(tail.data() + 9);
  if (!r.in_ || tail[0] != 'S' || signed_length != size - kSigBytes ||
      manifest_offset < kHeaderBytes || manifest_offset + kFrameHead > size - tail.size()) {
    throw BundleError(name + "truncated or extended (" + std::to_string(size) +
                      " bytes; no trailer describing this length at its end)");
  }

  // The signature, over every byte before it, before anything else is trusted.
  Poco::HMACEngine<BundleSha256> mac(key);
  r.in_.seekg(0);
  std::vector<char> buf(1 << 20);
  for (uint64_t left = signed_length; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    r.in_.read(buf.data(), static_cast<std::streamsize>(n));
    if (!r.in_) throw BundleError(name + "read failed");
    mac.update(buf.data(), n);
    left -= n;
  }
  if (Digest(mac) != std::string(tail.data() + kTrailerBytes, kSigBytes)) {
    throw BundleError(name + "signature mismatch: altered after signing, or signed with another key");
  }

  std::array<char, kFrameHead> frame{};
  r.in_.seekg(static_cast<std::streamoff>(manifest_offset));
  r.in_.read(frame.data(), frame.size());
  const uint64_t manifest_bytes = GetU64(frame.data() + 1);
  if (!r.in_ || frame[0] != 'M' || manifest_offset + kFrameHead + manifest_bytes != size - tail.size()) {
    throw BundleError(name + "malformed (no manifest where its trailer points)");
  }
  std::string text(manifest_bytes, '\0');
  r.in_.read(text.data(), static_cast<std::streamsize>(text.size()));
  r.manifest_ = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!r.in_ || !r.manifest_.is_object() || !r.manifest_.contains("sections") ||
      !r.manifest_["sections"].is_array()) {
    throw BundleError(name + "malformed manifest");
  }
  for (const auto& s : r.manifest_["sections"]) {
    if (!s.is_object() || !s.contains("offset") || !s["offset"].is_number_unsigned() || !s.contains("bytes") ||
        !s["bytes"].is_number_unsigned() || !s.contains("sha256") || !s["sha256"].is_string() ||
        s["offset"].get<uint64_t>() + kFrameHead + s["bytes"].get<uint64_t>() > manifest_offset) {
      throw BundleError(name + "malformed manifest (a section entry)");
    }
  }
  r.manifest_offset_ = manifest_offset;
  return r;
}

std::string BundleReader::Section(size_t i) {
  const std::string name = "bundle " + path_ + ": ";
  const nlohmann::json& entry = manifest_["sections"].at(i);
  const uint64_t offset = entry["offset"].get<uint64_t>();
  const uint64_t bytes = entry["bytes"].get<uint64_t>();
  std::array<char, kFrameHead> frame{};
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(offset));
  in_.read(frame.data(), frame.size());
  std::string data;
  if (in_ && frame[0] == 'C' && GetU64(frame.data() + 1) == bytes) {
    data.resize(bytes);
    in_.read(data.data(), static_cast<std::streamsize>(bytes));
  }
  if (!in_ || data.size() != bytes || Sha256Hex(data) != entry["sha256"].get<std::string>()) {
    throw BundleError(name + "section " + std::to_string(i) + " does not match its manifest entry (changed since it was opened?)");
  }
  return data;
}

}  // namespace dsync::table
