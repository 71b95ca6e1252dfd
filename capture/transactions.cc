// Captured transactions from binlog items (capture/transactions.h).
//
// Thread safety: see the header.
#include "capture/transactions.h"

#include <cctype>
#include <charconv>
#include <stdexcept>

namespace dsync::capture {
namespace {

template <class T>
T Number(std::string_view text) {
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw std::invalid_argument("not a number: '" + std::string(text.substr(0, 32)) + "'");
  }
  return v;
}

bool IdentifierChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || static_cast<unsigned char>(c) >= 0x80;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The first word of a statement, after blanks and /* comments */.
std::string FirstWord(std::string_view s) {
  size_t i = 0;
  for (;;) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (s.substr(i, 2) == "/*") {
      const size_t end = s.find("*/", i + 2);
      if (end == std::string_view::npos) return "";
      i = end + 2;
      continue;
    }
    break;
  }
  size_t j = i;
  while (j < s.size() && IdentifierChar(s[j])) ++j;
  return Lower(s.substr(i, j - i));
}

}  // namespace

GtidPosition GtidPosition::Parse(const std::string& text) {
  GtidPosition p;
  std::string_view rest(text);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view one = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!one.empty() && one.front() == ' ') one.remove_prefix(1);
    if (one.empty()) continue;
    const size_t a = one.find('-');
    const size_t b = a == std::string_view::npos ? a : one.find('-', a + 1);
    if (b == std::string_view::npos) throw std::invalid_argument("not a GTID: '" + std::string(one.substr(0, 64)) + "'");
    p.Advance(Number<uint32_t>(one.substr(0, a)), Number<uint32_t>(one.substr(a + 1, b - a - 1)),
              Number<uint64_t>(one.substr(b + 1)));
  }
  return p;
}

void GtidPosition::Advance(uint32_t domain, uint32_t server, uint64_t sequence) {
  domains_[domain] = Last{server, sequence};
}

std::string GtidPosition::Text() const {
  std::string out;
  for (const auto& [domain, last] : domains_) {
    if (!out.empty()) out += ',';
    out += std::to_string(domain) + "-" + std::to_string(last.server) + "-" + std::to_string(last.sequence);
  }
  return out;
}

std::string CapturedTransaction::GtidText() const {
  return std::to_string(domain) + "-" + std::to_string(server) + "-" + std::to_string(sequence);
}

std::optional<CapturedTransaction> TransactionAssembler::Feed(const BinlogItem& item) {
  using Type = BinlogItem::Type;
  switch (item.type) {
    case Type::kGtid:
      open_.emplace();
      open_->domain = item.domain;
      open_->server = item.server;
      open_->sequence = item.sequence;
      open_->committed_at = item.timestamp;
      standalone_ = item.standalone;
      return std::nullopt;
    case Type::kRows:
      if (!open_) return std::nullopt;  // rows before the first GTID of the stream: not ours to judge
      for (const auto& key : item.keys) open_->keys[item.table].emplace(key.dump(), key);
      open_->row_changes += item.rows;
      return std::nullopt;
    case Type::kShapeChange:
      if (open_) open_->pause.emplace(item.table, "row image of " + item.table + " does not match the table: " + item.text);
      return std::nullopt;
    case Type::kQuery:
      if (!open_) return std::nullopt;
      for (const std::string& t : DdlTables(item.text, tables_)) {
        std::string text = item.text.substr(0, 200);
        for (char& c : text) {
          if (static_cast<unsigned char>(c) < 0x20) c = ' ';
        }
        open_->pause.emplace(t, "DDL on " + t + ": " + text);
      }
      if (!standalone_) return std::nullopt;
      [[fallthrough]];
    case Type::kCommit: {
      if (!open_) return std::nullopt;
      CapturedTransaction done = std::move(*open_);
      open_.reset();
      done.file = item.file;
      done.end_pos = item.end_pos;
      if (item.timestamp != 0) done.committed_at = item.timestamp;
      return done;
    }
    default:
      return std::nullopt;
  }
}

std::set<std::string> DdlTables(const std::string& statement, const std::set<std::string>& tables) {
  static const std::set<std::string> kDdl = {"alter", "create", "drop", "rename", "truncate"};
  std::set<std::string> out;
  if (!kDdl.count(FirstWord(statement))) return out;
  const std::string lower = Lower(statement);
  for (const std::string& t : tables) {
    const std::string name = Lower(t);
    for (size_t at = lower.find(name); at != std::string::npos; at = lower.find(name, at + 1)) {
      const bool starts = at == 0 || !IdentifierChar(lower[at - 1]);
      const size_t end = at + name.size();
      const bool ends = end == lower.size() || !IdentifierChar(lower[end]);
      if (starts && ends) {
        out.insert(t);
        break;
      }
    }
  }
  return out;
}

}  // namespace dsync::capture
