// `dsync events --attention` (every event that cannot make progress or needs a look,
// with why: api::EventStore::NeedingAttention, the rules of v_events_needing_attention)
// and `dsync cancel CODE [--reason TEXT]` (api::EventStore::Cancel). Human tables by
// default, the API's JSON with --json. Stored text is printed with control, bidi and
// zero-width characters escaped (\xNN, \u{NNNN}), so a code or an error cannot drive
// the terminal.
#include <cstdio>
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "api/event_store.h"
#include "app/command_support.h"
#include "core/error.h"
#include "core/log.h"

namespace dsync::app {
namespace {

// One line of at most `width` bytes (before escaping) with every C0/C1 control, DEL,
// bidi override/isolate and zero-width character shown escaped.
std::string Shown(const std::string& s, size_t width) {
  std::string text = s.size() > width ? s.substr(0, width - 3) + "..." : s;
  std::string out;
  char buf[16];
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x20 || b == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", b);
      out += buf;
      continue;
    }
    // C1 controls (U+0080..U+009F) and U+200B..U+200F, U+202A..U+202E, U+2060..U+206F.
    if (b == 0xc2 && i + 1 < text.size()) {
      const auto c = static_cast<unsigned char>(text[i + 1]);
      if (c >= 0x80 && c <= 0x9f) {
        std::snprintf(buf, sizeof buf, "\\u{%04x}", c);
        out += buf;
        ++i;
        continue;
      }
    }
    if (b == 0xe2 && i + 2 < text.size()) {
      const auto c = static_cast<unsigned char>(text[i + 1]), d = static_cast<unsigned char>(text[i + 2]);
      const unsigned cp = ((b & 0x0fu) << 12) | ((c & 0x3fu) << 6) | (d & 0x3fu);
      if ((cp >= 0x200b && cp <= 0x200f) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f)) {
        std::snprintf(buf, sizeof buf, "\\u{%04x}", cp);
        out += buf;
        i += 2;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

struct Store {
  Settings settings;
  std::unique_ptr<storage::ConnectionPool> pool;
  std::unique_ptr<api::EventStore> store;
};

Store OpenStore(const Invocation& inv) {
  Store s;
  s.settings = ResolveSettings(inv);
  SetupLogging(inv.Get("log-level").value_or("warn"), "cli");
  s.pool = OpenDatabase(s.settings);
  s.store = std::make_unique<api::EventStore>(*s.pool, s.settings);
  return s;
}

}  // namespace

int RunEventsAttention(const Invocation& inv) {
  for (const char* flag : {"status", "topic", "after", "batch"}) {
    if (inv.Get(flag)) throw UsageError(std::string("--") + flag + " cannot be combined with --attention");
  }
  if (!inv.args.empty()) throw UsageError("--attention takes no argument");
  const int limit = inv.Get("limit") ? ParseIntOption("limit", *inv.Get("limit"), 1, 1000) : 50;
  Store s = OpenStore(inv);
  const std::vector<api::AttentionRow> rows = s.store->NeedingAttention(limit);
  if (inv.Flag("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& a : rows) out.push_back(api::ToJson(a));
    std::cout << nlohmann::json{{"attention", out}, {"limit_per_reason", limit}}.dump(2) << "\n";
    return 0;
  }
  std::cout << std::left << std::setw(27) << "REASON" << std::setw(26) << "CODE" << std::setw(14) << "TOPIC"
            << std::setw(13) << "STATUS" << std::setw(22) << "ENTITY" << "WHY\n";
  for (const auto& a : rows) {
    std::string why = a.detail.empty() ? a.last_error : a.detail;
    if (a.reason == "stuck") why = "no activity for " + std::to_string(a.idle_s) + " s on " + a.node_address;
    std::cout << std::left << std::setw(27) << a.reason << std::setw(26) << Shown(a.code, 25) << std::setw(14)
              << Shown(a.topic, 13) << std::setw(13) << a.status << std::setw(22)
              << Shown(a.tenant_id + "/" + a.data_id, 21) << Shown(why, 200) << "\n";
  }
  if (rows.empty()) std::cout << "(nothing needs attention)\n";
  return 0;
}

int RunCancel(const Invocation& inv) {
  Store s = OpenStore(inv);
  api::EventRow e = s.store->Cancel(inv.args.at(0), inv.Get("reason").value_or(""));
  if (inv.Flag("json")) {
    std::cout << api::ToJson(e).dump(2) << "\n";
  } else {
    std::cout << "event " << Shown(e.code, 64) << " cancelled: " << e.status << " (version " << e.version
              << ", " << Shown(e.last_error, 200) << "); the events held behind it by the ordering rule no longer wait for it\n";
  }
  return 0;
}

}  // namespace dsync::app
