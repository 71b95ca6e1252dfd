// RelaySource (table/relay.h): the source half of a relayed table_sync, and the pieces
// both halves share (the hash list's bytes, the checksum's text, the totals).
#include <algorithm>
#include <unordered_map>

#include "table/relay.h"

namespace dsync::table {
namespace {

constexpr Millis kSourceReportEvery{1000};
constexpr Millis kPresenceCheckEvery{5000};  // RelayControl::target_gone

bool RangeFinished(const RelayRange& r) { return r.state == "EQUAL" || r.state == "SENT" || r.state == "APPLIED"; }

std::optional<Row> KeyOfJson(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  return KeyFromJson(nlohmann::json::parse(*text));
}

std::string JsonOfKey(const Row& key) { return KeyToJson(key).dump(); }

size_t RelayRowBytes(const Row& row) {
  size_t n = 0;
  for (const Cell& c : row) n += c ? c->size() + 1 : 1;
  return n;
}

bool SliceByInteger(const ColumnSet& key) { return SingleIntegerKey(key); }

// Whether integer key k lies in (lo, hi] (nullopt: unbounded on that side).
bool IntWithin(const Row& k, const std::optional<Row>& lo, const std::optional<Row>& hi) {
  const IntKey v = IntKey::Of(k);
  if (lo && !(IntKey::Of(*lo) < v)) return false;
  if (hi && IntKey::Of(*hi) < v) return false;
  return true;
}

}  // namespace

nlohmann::json RelayTotals::ToJson() const {
  return {{"ranges", ranges},           {"ranges_equal", ranges_equal}, {"chunks", chunks},
          {"rows_relayed", rows_relayed}, {"rows_written", rows_written}, {"bytes_relayed", bytes_relayed}};
}

std::string ChecksumText(const RangeChecksum& c) { return std::to_string(c.rows) + ":" + std::to_string(c.crc_xor); }

std::string EncodeKeyHashes(const ColumnSet& key, const KeyHashes& hashes) {
  RelayChunk chunk;
  chunk.key_columns = key.names();
  chunk.columns = key.names();
  chunk.columns.push_back("#hash");
  chunk.rows.reserve(hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    Row r = hashes.key(i);
    r.emplace_back(std::to_string(hashes.hash(i)));
    chunk.rows.push_back(std::move(r));
  }
  return EncodeRelayChunk(chunk);
}

KeyHashes DecodeKeyHashes(const ColumnSet& key, const std::string& bytes) {
  RelayChunk chunk = DecodeRelayChunk(bytes);
  if (chunk.key_columns != key.names() || chunk.columns.size() != key.size() + 1 || chunk.columns.back() != "#hash") {
    throw RelayFormatError("relay hashes: not the hash list of key (" + key.NameList() + ")");
  }
  KeyHashes out(key);
  out.reserve(chunk.rows.size());
  for (Row& r : chunk.rows) {
    const Cell hash = r.back();
    r.pop_back();
    std::optional<uint32_t> h = hash ? ParseInt<uint32_t>(*hash) : std::nullopt;
    if (!h) throw RelayFormatError("relay hashes: a hash that is not a 32-bit number");
    out.Add(r, *h);
  }
  return out;
}

RelaySource::RelaySource(RelayTable& relay, RelayHalf half, SourceSide& side, RelayOptions options,
                         RelayControl control)
    : relay_(relay), half_(std::move(half)), side_(side), options_(options), control_(std::move(control)) {}

RelayTotals RelaySource::Run() {
  std::vector<RelayRange> pending;  // read and not finished, in range order
  int fetched_through = 0;
  last_progress_ = control_.clock.Now();
  last_presence_check_ = control_.clock.Now();
  for (;;) {
    if (control_.stop.stop_requested()) throw RelayStopped("relay: the source half stopped");
    bool progressed = false;
    {
      if (static_cast<int>(pending.size()) < options_.lookahead) {
        for (RelayRange& r : relay_.ReadRanges(half_, fetched_through, options_.lookahead - static_cast<int>(pending.size()))) {
          fetched_through = r.range_no;
          pending.push_back(std::move(r));
          progressed = true;
        }
      }
      progressed |= GiveVerdicts(pending);
      if (!pending.empty() && !RangeFinished(pending.front())) progressed |= SendFront(pending.front());
      while (!pending.empty() && RangeFinished(pending.front())) {
        const bool last = !pending.front().hi_key;
        ++totals_.ranges;
        pending.erase(pending.begin());
        if (last) {
          relay_.SetState(half_, "SOURCE_DONE");
          Report();
          return totals_;
        }
      }
    }
    Report();
    if (progressed) {
      last_progress_ = control_.clock.Now();
      continue;
    }
    // Nothing to do: is the other half still there? Reads are not fenced, so a new epoch
    // (the target half taken over) shows here, not in a write.
    const std::optional<RelayStatus> st = relay_.Read(half_.step_code);
    if (!st) throw RelayLost("relay of step '" + half_.step_code + "': no relay row (dropped)");
    if (control_.target_gone && control_.clock.Now() - last_presence_check_ >= kPresenceCheckEvery) {
      last_presence_check_ = control_.clock.Now();
      if (control_.target_gone()) throw RelayFailed("the target half's process is gone (killed?)");
    }
    if (st->state == "DONE") {  // the target half needs nothing more (every range it had is done)
      Report();
      return totals_;
    }
    if (st->state == "FAILED") throw RelayFailed(st->error.value_or("the target half failed"));
    if (st->source_attempt != half_.attempt) {
      throw RelayLost("relay of step '" + half_.step_code + "': the source half of attempt " +
                      std::to_string(half_.attempt) + " was taken over by attempt " + std::to_string(st->source_attempt));
    }
    if (st->epoch != half_.epoch) {
      throw RelayLost("relay of step '" + half_.step_code + "': epoch " + std::to_string(half_.epoch) +
                      " ended (the target half started epoch " + std::to_string(st->epoch) + ")");
    }
    Wait(control_.clock.Now() - last_progress_ > std::chrono::seconds(1));
  }
}

bool RelaySource::GiveVerdicts(std::vector<RelayRange>& ranges) {
  bool any = false;
  for (RelayRange& r : ranges) {
    if (r.state != "PUBLISHED") continue;
    const KeyRange range{KeyOfJson(r.lo_key), KeyOfJson(r.hi_key)};
    const RangeChecksum mine = side_.Checksum(range);
    if (ChecksumText(mine) == r.target_checksum) {
      relay_.SetRangeState(half_, r.range_no, "EQUAL");
      r.state = "EQUAL";
      ++totals_.ranges_equal;
    } else if (r.target_rows == 0) {
      r.state = "COPY";  // known here only: the source's rows go whole
    } else {
      relay_.SetRangeState(half_, r.range_no, "HASHES_WANTED");
      r.state = "HASHES_WANTED";
    }
    any = true;
  }
  return any;
}

bool RelaySource::SendFront(RelayRange& r) {
  if (r.state == "PUBLISHED") return false;  // its verdict comes first (GiveVerdicts)
  if (r.target_rows == 0 && (r.state == "COPY" || r.state == "SENDING")) return Copy(r);
  return Diff(r);
}

bool RelaySource::Copy(RelayRange& r) {
  const std::optional<Row> hi = KeyOfJson(r.hi_key);
  const std::optional<Row> lo = r.sent_hi ? KeyOfJson(r.sent_hi) : KeyOfJson(r.lo_key);
  const size_t limit = options_.chunk_rows;
  std::vector<Row> rows = side_.Rows({lo, hi}, limit);
  // Keep under chunk_bytes: the rows past it wait for the next chunk.
  size_t bytes = 0, keep = 0;
  for (; keep < rows.size(); ++keep) {
    bytes += RelayRowBytes(rows[keep]);
    if (keep > 0 && bytes > options_.chunk_bytes) break;
  }
  const bool last = keep == rows.size() && rows.size() < limit;
  rows.resize(keep);
  RelayChunk chunk;
  chunk.columns = side_.column_names();
  chunk.key_columns = side_.key().names();
  chunk.lo = lo;
  chunk.hi = last ? hi : std::optional<Row>(side_.KeyOf(rows.back()));
  chunk.rows = std::move(rows);
  const std::optional<Row> next = chunk.hi;
  Send(r, std::move(chunk), last);
  r.state = last ? "SENT" : "SENDING";
  if (!last) r.sent_hi = JsonOfKey(*next);
  return true;
}

bool RelaySource::Diff(RelayRange& r) {
  std::optional<std::string> bytes = relay_.ReadHashes(half_, r.range_no);
  if (!bytes) return false;  // the target half has not answered yet
  const ColumnSet& key = side_.key();
  const KeyHashes target = DecodeKeyHashes(key, *bytes);
  const std::optional<Row> range_lo = KeyOfJson(r.lo_key);
  const std::optional<Row> hi = KeyOfJson(r.hi_key);
  std::optional<Row> cur = r.sent_hi ? KeyOfJson(r.sent_hi) : range_lo;
  const bool fresh = !r.sent_hi;
  const bool sliced = SliceByInteger(key);

  // Integer keys: slices of the source's rows, each compared with the target keys that
  // fall in it, each one chunk. Other keys: the range whole (their order is the
  // database's collation, not something to compare here), split into chunks at source
  // keys, the keys to delete in the range's first chunk.
  size_t slice = sliced ? 4 * options_.chunk_rows : 0;
  for (;;) {
    KeyHashes mine = side_.Hashes({cur, hi}, slice);
    const bool whole = slice == 0 || mine.size() < slice;
    const std::optional<Row> slice_hi = whole ? hi : std::optional<Row>(mine.key(mine.size() - 1));
    KeyHashes theirs(key);
    if (sliced) {
      for (size_t i = 0; i < target.size(); ++i) {
        Row k = target.key(i);
        if (IntWithin(k, cur, slice_hi)) theirs.Add(k, target.hash(i));
      }
    }
    const KeyHashes& against = sliced ? theirs : target;
    const HashDiff diff = DiffHashes(mine, against);
    std::vector<size_t> changed = diff.missing;
    changed.insert(changed.end(), diff.different.begin(), diff.different.end());
    std::sort(changed.begin(), changed.end());
    if (sliced && changed.size() > options_.chunk_rows && slice > 1) {
      slice = std::max<size_t>(1, slice / 4);  // too many differ for one chunk: a shorter slice
      continue;
    }
    std::vector<Row> deletes;
    // Extra target keys: in the slice (integer keys), or, for other keys, only when the
    // range starts fresh (a resumed range sent them in its first chunk already).
    if (options_.delete_missing && (sliced || fresh)) {
      for (size_t i : diff.extra) deletes.push_back(against.key(i));
    }
    std::vector<Row> keys;
    keys.reserve(changed.size());
    for (size_t i : changed) keys.push_back(mine.key(i));
    std::vector<Row> rows = keys.empty() ? std::vector<Row>{} : side_.RowsOfKeys(keys);

    if (sliced) {
      size_t total = 0;
      for (const Row& row : rows) total += RelayRowBytes(row);
      if (total > options_.chunk_bytes && slice > 1 && rows.size() > 1) {
        slice = std::max<size_t>(1, std::min(slice, rows.size()) / 4);
        continue;
      }
      RelayChunk chunk;
      chunk.columns = side_.column_names();
      chunk.key_columns = key.names();
      chunk.lo = cur;
      chunk.hi = slice_hi;
      chunk.rows = std::move(rows);
      chunk.deletes = std::move(deletes);
      Send(r, std::move(chunk), whole);
      r.state = whole ? "SENT" : "SENDING";
      if (!whole) r.sent_hi = JsonOfKey(*slice_hi);
      return true;
    }

    // Other keys: the whole range, in chunks split at source keys.
    size_t at = 0;
    bool first = true;
    do {
      size_t bytes_in = 0, end = at;
      while (end < rows.size() && end - at < options_.chunk_rows) {
        bytes_in += RelayRowBytes(rows[end]);
        ++end;
        if (bytes_in > options_.chunk_bytes) break;
      }
      const bool last = end == rows.size();
      RelayChunk chunk;
      chunk.columns = side_.column_names();
      chunk.key_columns = key.names();
      chunk.lo = cur;
      chunk.hi = last ? hi : std::optional<Row>(side_.KeyOf(rows[end - 1]));
      chunk.rows.assign(rows.begin() + static_cast<std::ptrdiff_t>(at), rows.begin() + static_cast<std::ptrdiff_t>(end));
      if (first) chunk.deletes = std::move(deletes);
      cur = chunk.hi;
      Send(r, std::move(chunk), last);
      if (!last) r.sent_hi = JsonOfKey(*cur);
      first = false;
      at = end;
    } while (at < rows.size());
    r.state = "SENT";
    return true;
  }
}

void RelaySource::Send(const RelayRange& range, RelayChunk chunk, bool last) {
  const std::string data = EncodeRelayChunk(chunk);
  const int rows = static_cast<int>(chunk.rows.size() + chunk.deletes.size());
  const std::optional<std::string> sent_hi = chunk.hi ? std::optional<std::string>(JsonOfKey(*chunk.hi)) : std::nullopt;
  for (;;) {
    if (control_.stop.stop_requested()) throw RelayStopped("relay: the source half stopped");
    if (relay_.AddChunk(half_, range.range_no, last, rows, data, sent_hi)) break;
    Wait(false);  // the window is full: the target half is applying
  }
  ++totals_.chunks;
  totals_.rows_relayed += rows;
  totals_.bytes_relayed += static_cast<int64_t>(data.size());
  last_progress_ = control_.clock.Now();
}

void RelaySource::Wait(bool idle) {
  if (!control_.clock.SleepFor(idle ? options_.idle_poll : options_.poll, control_.stop)) {
    throw RelayStopped("relay: the source half stopped");
  }
}

void RelaySource::Report() {
  if (!control_.progress) return;
  const auto now = control_.clock.Now();
  if (now - last_report_ < kSourceReportEvery) return;
  last_report_ = now;
  nlohmann::json p = totals_.ToJson();
  p["half"] = "source";
  p["epoch"] = half_.epoch;
  control_.progress(p);
}

}  // namespace dsync::table
