// RelayTarget (table/relay.h): the target half of a relayed table_sync.
#include "table/relay.h"

namespace dsync::table {
namespace {

constexpr Millis kTargetReportEvery{1000};

std::optional<Row> RangeKey(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  return KeyFromJson(nlohmann::json::parse(*text));
}

std::optional<std::string> RangeKeyJson(const std::optional<Row>& key) {
  if (!key) return std::nullopt;
  return KeyToJson(*key).dump();
}

}  // namespace

RelayTarget::RelayTarget(RelayTable& relay, RelayHalf half, TargetSide& side, std::vector<KeyRange> segments,
                         RelayOptions options, RelayControl control)
    : relay_(relay),
      half_(std::move(half)),
      side_(side),
      segments_(std::move(segments)),
      options_(options),
      control_(std::move(control)) {}

RelayTotals RelayTarget::Run() {
  published_all_ = segments_.empty();
  if (!published_all_) next_lo_ = segments_[0].lo;
  last_progress_ = control_.clock.Now();
  for (;;) {
    if (control_.stop.stop_requested()) throw RelayStopped("relay: the target half stopped");
    bool progressed = PublishMore();
    std::vector<RelayRange> ranges = relay_.ReadRanges(half_, front_, options_.lookahead);
    progressed |= AnswerHashes(ranges);
    if (!ranges.empty()) {
      progressed |= ApplyFront(ranges.front());
    } else if (published_all_ && front_ == next_range_no_ - 1) {
      side_.Finish();
      relay_.SetState(half_, "DONE");
      last_report_ = {};  // the last word always reported
      Report();
      return totals_;
    }
    Report();
    if (progressed) {
      last_progress_ = control_.clock.Now();
      continue;
    }
    const std::optional<RelayStatus> st = relay_.Read(half_.step_code);
    if (st && st->state == "FAILED" && st->target_attempt == half_.attempt && st->epoch == half_.epoch) {
      throw RelayFailed(st->error.value_or("the source half failed"));
    }
    if (!st || st->target_attempt != half_.attempt || st->epoch != half_.epoch) {
      throw RelayLost("relay of step '" + half_.step_code + "': the target half of attempt " +
                      std::to_string(half_.attempt) + " was taken over");
    }
    Wait(control_.clock.Now() - last_progress_ > std::chrono::seconds(1));
  }
}

bool RelayTarget::PublishMore() {
  if (published_all_) return false;
  std::vector<RelayRange> batch;
  int unfinished = next_range_no_ - 1 - front_;
  while (unfinished < options_.lookahead && !published_all_) {
    const std::optional<Row>& end = segments_[segment_].hi;
    std::optional<Row> hi = side_.NthKeyAfter(next_lo_, options_.compare_rows);
    // A segment with an end (a lane's: integer keys) is never overrun.
    const bool segment_done = !hi || (end && !(IntKey::Of(*hi) < IntKey::Of(*end)));
    if (segment_done) hi = end;
    const KeyRange range{next_lo_, hi};
    const RangeChecksum cs = side_.Checksum(range);
    RelayRange r;
    r.range_no = next_range_no_++;
    r.lo_key = RangeKeyJson(next_lo_);
    r.hi_key = RangeKeyJson(hi);
    r.target_rows = cs.rows;
    r.target_checksum = ChecksumText(cs);
    batch.push_back(std::move(r));
    next_lo_ = hi;
    ++unfinished;
    if (segment_done) {
      if (++segment_ == segments_.size()) {
        published_all_ = true;
      } else {
        next_lo_ = segments_[segment_].lo;
      }
    }
  }
  relay_.PublishRanges(half_, batch);
  return !batch.empty();
}

bool RelayTarget::AnswerHashes(const std::vector<RelayRange>& ranges) {
  bool any = false;
  for (const RelayRange& r : ranges) {
    if (r.state != "HASHES_WANTED") continue;
    const KeyHashes hashes = side_.Hashes({RangeKey(r.lo_key), RangeKey(r.hi_key)});
    relay_.PublishHashes(half_, r.range_no, EncodeKeyHashes(side_.key(), hashes));
    any = true;
  }
  return any;
}

bool RelayTarget::ApplyFront(const RelayRange& front) {
  if (front.state == "EQUAL") {
    side_.RecordEqual({RangeKey(front.lo_key), RangeKey(front.hi_key)});
    relay_.DropRangesThrough(half_, front.range_no);
    front_ = front.range_no;
    ++totals_.ranges;
    ++totals_.ranges_equal;
    return true;
  }
  bool any = false;
  for (const RelayChunkRow& row : relay_.ReadChunks(half_, last_chunk_, 4)) {
    if (row.range_no != front.range_no) {
      throw RelayFormatError("relay of step '" + half_.step_code + "': chunk " + std::to_string(row.chunk_no) +
                             " of range " + std::to_string(row.range_no) + " came before range " +
                             std::to_string(front.range_no) + " was complete");
    }
    const RelayChunk chunk = DecodeRelayChunk(row.data);
    totals_.rows_written += side_.Apply(chunk);
    relay_.RemoveChunk(half_, row.chunk_no);
    last_chunk_ = row.chunk_no;
    ++totals_.chunks;
    totals_.rows_relayed += row.row_count;
    totals_.bytes_relayed += static_cast<int64_t>(row.data.size());
    any = true;
    if (row.last_of_range) {
      relay_.DropRangesThrough(half_, front.range_no);
      front_ = front.range_no;
      ++totals_.ranges;
      break;
    }
  }
  return any;
}

void RelayTarget::Wait(bool idle) {
  if (!control_.clock.SleepFor(idle ? options_.idle_poll : options_.poll, control_.stop)) {
    throw RelayStopped("relay: the target half stopped");
  }
}

void RelayTarget::Report() {
  if (!control_.progress) return;
  const auto now = control_.clock.Now();
  if (now - last_report_ < kTargetReportEvery) return;
  last_report_ = now;
  nlohmann::json p = totals_.ToJson();
  p["half"] = "target";
  p["epoch"] = half_.epoch;
  control_.progress(p);
}

}  // namespace dsync::table
