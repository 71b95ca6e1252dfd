// A capture's reader loop (capture/capture_runner.h).
//
// Thread safety: see the header.
#include "capture/capture_runner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <vector>

#include <spdlog/spdlog.h>

#include "capture/binlog_stream.h"
#include "capture/capture_events.h"
#include "capture/transactions.h"
#include "config/step_datasources.h"
#include "storage/db_url.h"
#include "table/sql.h"
#include "table/where.h"
#include "events/status.h"

namespace dsync::capture {
namespace {

using nlohmann::json;

// "int(10) unsigned" -> "int".
std::string DataType(const std::string& column_type) {
  size_t end = column_type.find_first_of("( ");
  std::string t = column_type.substr(0, end);
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t;
}

// The key of `table` on the source as row images lay it out. Throws PreflightError.
TableKey DescribeKey(storage::ConnectionPool& source, const std::string& capture, const std::string& ds,
                     const std::string& table) {
  auto schema = source.Run("capture: describe " + table,
                           [&](storage::Connection& c) { return table::DescribeTable(c, ds, table); });
  const std::string where = "capture " + capture + ": table " + ds + "." + table;
  if (!schema) throw PreflightError(where + " does not exist: create it, or remove it from captures." + capture + ".tables");
  if (schema->key.empty()) throw PreflightError(where + " has no primary key: capture re-reads rows by key; add one");
  TableKey key;
  key.column_count = schema->columns.size();
  for (const std::string& k : schema->key) {
    for (size_t i = 0; i < schema->columns.size(); ++i) {
      const table::Column& col = schema->columns[i];
      if (col.name != k) continue;
      const std::string problem = KeyColumnProblem(DataType(col.column_type));
      if (!problem.empty()) throw PreflightError(where + ": key column `" + k + "`: " + problem);
      key.columns.push_back({i, col.kind == table::ColumnKind::kUnsigned, k});
    }
  }
  return key;
}

// The captured tables of the source's schema, their keys described once, and the
// paused ones left out.
class SourceCatalog final : public KeyCatalog {
 public:
  SourceCatalog(std::string schema, std::map<std::string, TableKey> keys)
      : schema_(std::move(schema)), keys_(std::move(keys)) {}

  const TableKey* Keys(const std::string& schema, const std::string& table) override {
    if (schema != schema_ || paused_.count(table)) return nullptr;
    auto it = keys_.find(table);
    return it == keys_.end() ? nullptr : &it->second;
  }
  void SetPaused(std::set<std::string> paused) { paused_ = std::move(paused); }
  void Pause(const std::string& table) { paused_.insert(table); }
  const std::set<std::string>& paused() const { return paused_; }

 private:
  const std::string schema_;
  const std::map<std::string, TableKey> keys_;
  std::set<std::string> paused_;
};

std::set<std::string> PausedSet(const json& paused) {
  std::set<std::string> out;
  if (paused.is_object()) {
    for (const auto& [table, _] : paused.items()) out.insert(table);
  }
  return out;
}

storage::PoolOptions OnePool() {
  storage::PoolOptions o;
  o.max_size = 1;
  return o;
}

// Unique per call in this process and across processes (pid, address, counter).
std::string MakeProbeId() {
  static std::atomic<uint64_t> n{0};
  return std::to_string(::getpid()) + ":" + std::to_string(reinterpret_cast<uintptr_t>(&n)) + ":" +
         std::to_string(n.fetch_add(1));
}

std::string Variable(storage::Connection& c, const std::string& sql) { return c.QueryString(sql).value_or(""); }

}  // namespace

void Preflight(const std::string& name, const CaptureSettings& capture, const std::string& source_url,
               const std::string& start_gtid) {
  const storage::DbUrl url = storage::DbUrl::Parse(source_url);
  storage::ConnectionPool source(url, OnePool());
  const std::string who = "capture " + name + ": source " + capture.source;
  const std::string fix_server = " (in its my.cnf: log_bin, binlog_format=ROW, binlog_row_image=FULL, server_id)";
  const std::string grant_fix = ": GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO " + url.user;
  source.Run("capture preflight", [&](storage::Connection& c) {
    if (Variable(c, "SELECT @@log_bin") != "1") {
      throw PreflightError(who + " has its binary log off: start its server with --log-bin --binlog-format=ROW "
                                 "--binlog-row-image=FULL" + fix_server);
    }
    const std::string format = Variable(c, "SELECT @@binlog_format");
    if (format != "ROW") {
      throw PreflightError(who + " has binlog_format=" + format +
                           ": SET GLOBAL binlog_format=ROW (and in its my.cnf; sessions started before keep theirs)");
    }
    const std::string image = Variable(c, "SELECT @@binlog_row_image");
    if (image != "FULL") {
      throw PreflightError(who + " has binlog_row_image=" + image + ": SET GLOBAL binlog_row_image=FULL (and in its my.cnf)");
    }
    try {
      (void)c.QueryString("SELECT @@gtid_binlog_pos");
    } catch (const DbError&) {
      throw PreflightError(who + " has no MariaDB GTIDs (@@gtid_binlog_pos): capture reads MariaDB >= 10.6 sources");
    }
    try {
      (void)c.Query("SHOW BINARY LOGS");
    } catch (const DbError& e) {
      throw PreflightError(who + ": user " + url.user + " lacks REPLICATION CLIENT (SHOW BINARY LOGS: " + e.what() + ")" +
                           grant_fix);
    }
    bool slave = false;
    auto rs = c.Query("SHOW GRANTS");
    while (rs->next()) {
      std::string g = rs->getString(1);
      for (char& ch : g) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (g.find("ON *.*") == std::string::npos) continue;
      if (g.find("ALL PRIVILEGES") != std::string::npos || g.find("REPLICATION SLAVE") != std::string::npos ||
          g.find("REPLICATION REPLICA") != std::string::npos) {
        slave = true;
      }
    }
    if (!slave) throw PreflightError(who + ": user " + url.user + " lacks REPLICATION SLAVE" + grant_fix);
  });
  for (const std::string& table : capture.tables) (void)DescribeKey(source, name, capture.source, table);
  for (const auto& [table, filter] : capture.where) {
    const std::string where = "capture " + name + ": where of " + table;
    table::CompiledWhere compiled;
    try {
      compiled = table::CompileWhere(filter);
    } catch (const std::exception& e) {
      throw PreflightError(where + ": " + e.what());
    }
    if (!compiled.params.empty()) {
      throw PreflightError(where + " uses :" + compiled.params[0] +
                           ": a capture's filter has no payload to bind it from; write the value itself");
    }
  }
  if (start_gtid.empty()) return;
  // Whether the server still has the binlog after the position: ask for it.
  struct NoTables final : KeyCatalog {
    const TableKey* Keys(const std::string&, const std::string&) override { return nullptr; }
  } none;
  // A server id of this probe's own: a replica connecting with the id of another's
  // dump ends that one (the reader's, or another process's probe).
  BinlogStream probe(url, CaptureServerId("preflight:" + MakeProbeId(), name), none, {.heartbeat = Millis(300)});
  try {
    probe.Open(start_gtid);
    for (int i = 0; i < 20; ++i) {
      const BinlogItem item = probe.Next();
      if (item.type == BinlogItem::Type::kGtid || item.type == BinlogItem::Type::kHeartbeat) break;
    }
  } catch (const StreamError& e) {
    if (e.kind() == StreamError::Kind::kPurged) {
      throw PreflightError(who + " no longer has the binlog after position " + start_gtid +
                           " (purged): start the capture afresh with dsync capture resume " + name +
                           " --restart (a full copy, then the binlog) [" + e.what() + "]");
    }
    if (e.kind() == StreamError::Kind::kRefused) {
      throw PreflightError(who + ": user " + url.user + " may not read the binlog: " + e.what() + grant_fix);
    }
    throw;  // lost connection and the like: not a refusal, tried again
  }
}

CaptureRunner::CaptureRunner(std::string name, CaptureSettings capture, CaptureEnv env)
    : name_(std::move(name)), capture_(std::move(capture)), env_(std::move(env)), store_(*env_.framework, env_.service) {}

CaptureRunner::~CaptureRunner() = default;

void CaptureRunner::Run(std::stop_token stop) {
  Clock& clock = *env_.clock;
  const Millis acquire_every = std::max(Millis(100), env_.options.lease_ttl / 10);
  while (!stop.stop_requested()) {
    std::optional<int64_t> token;
    try {
      store_.Ensure(name_, capture_.source, capture_.target, capture_.lag_bound_s);
      token = store_.TryAcquire(name_, env_.holder, env_.options.lease_ttl);
    } catch (const Error& e) {
      spdlog::warn("CAPTURE_ERROR capture={} holder={} err=\"{}\"", name_, env_.holder, e.what());
    }
    if (!token) {
      clock.SleepFor(acquire_every, stop);
      continue;
    }
    stats_.lease_acquired++;
    spdlog::info("CAPTURE_LEASE_ACQUIRED capture={} holder={} token={}", name_, env_.holder, *token);
    struct Leading {
      std::atomic<bool>& flag;
      explicit Leading(std::atomic<bool>& f) : flag(f) { flag = true; }
      ~Leading() { flag = false; }
    } leading(stats_.leading);
    try {
      LeadOnce(*token, stop);
    } catch (const LeaseLost& e) {
      stats_.lease_lost++;
      spdlog::warn("CAPTURE_LEASE_LOST capture={} holder={} token={} err=\"{}\"", name_, env_.holder, *token, e.what());
      continue;
    } catch (const std::exception& e) {
      stats_.errors++;
      const std::string what = storage::MaskPasswords(e.what());
      spdlog::error("CAPTURE_ERROR capture={} holder={} token={} err=\"{}\"", name_, env_.holder, *token, what);
      const bool definitive = dynamic_cast<const PreflightError*>(&e) != nullptr;
      try {
        store_.RecordError(name_, env_.holder, *token, definitive ? "FAILED" : "", what);
      } catch (const std::exception&) {
        // the lease went too: the next holder records its own
      }
    }
    clock.SleepFor(env_.options.retry_pause, stop);
  }
  try {
    store_.Release(name_, env_.holder);
  } catch (const std::exception&) {
  }
}

void CaptureRunner::LeadOnce(int64_t token, std::stop_token stop) {
  Clock& clock = *env_.clock;
  const RunnerOptions& o = env_.options;
  const Millis margin = o.lease_ttl / 5;
  const Millis renew_every = o.lease_ttl / 3;
  auto last_renew = clock.Now();
  auto renew = [&] {
    if (!store_.Renew(name_, env_.holder, token, o.lease_ttl)) throw LeaseLost("renew refused");
    last_renew = clock.Now();
  };
  const storage::DbUrl source_url = storage::DbUrl::Parse(env_.source_url);
  EventContext ectx{name_, env_.service, RouteKey({capture_.source, capture_.target}), ""};

  std::optional<CaptureRow> row = store_.Read(name_);
  if (!row) throw LeaseLost("the capture's row is gone");

  // FAILED: wait for the operator's resume, holding the lease.
  if (row->state == "FAILED") {
    spdlog::warn("CAPTURE_FAILED capture={} err=\"{}\" action=\"waiting for: dsync capture resume {}\"", name_,
                 row->last_error, name_);
  }
  while (row->state == "FAILED") {
    if (!clock.SleepFor(Millis(1000), stop)) return;
    renew();
    row = store_.Read(name_);
  }

  if (row->state == "NEW") {
    Preflight(name_, capture_, env_.source_url, "");
    storage::ConnectionPool source(source_url, OnePool());
    const std::string start = source.Run("capture: start position", [](storage::Connection& c) {
      return c.QueryString("SELECT @@gtid_binlog_pos").value_or("");
    });
    const std::string salt = std::to_string(token) + ":" +
                             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                clock.WallNow().time_since_epoch()).count());
    std::vector<events::NewEventRow> copies = CopyEvents(ectx, capture_.tables, start, salt);
    json codes = json::array();
    for (const auto& e : copies) codes.push_back(e.code);
    Checkpoint cp;
    cp.gtid = start;
    cp.state = "COPYING";
    cp.copy_events = codes;
    store_.Commit(name_, env_.holder, token, o.lease_ttl, margin, cp, copies);
    spdlog::info("CAPTURE_COPY_STARTED capture={} position={} tables={} events={}", name_, start, capture_.tables.size(),
                 codes.dump());
    row = store_.Read(name_);
  }

  while (row->state == "COPYING") {
    std::vector<std::string> codes;
    for (const auto& c : row->copy_events) codes.push_back(c.get<std::string>());
    size_t done = 0;
    for (const auto& [code, status] : store_.EventStatuses(codes)) {
      const std::optional<events::EventStatus> st = events::ParseEventStatus(status.first);
      if (st == events::EventStatus::kSuccess) {
        ++done;
      } else if (st && events::IsTerminal(*st)) {
        store_.RecordError(name_, env_.holder, token, "FAILED",
                           "initial copy event " + code + " ended " + status.first + ": " + status.second.substr(0, 300) +
                               " (fix it, then: dsync capture resume " + name_ + ")");
        return;
      }
    }
    if (done == codes.size()) {
      Checkpoint cp;
      cp.gtid = row->gtid;
      cp.file = row->file;
      cp.pos = row->pos;
      cp.state = "RUNNING";
      store_.Commit(name_, env_.holder, token, o.lease_ttl, margin, cp, {});
      spdlog::info("CAPTURE_COPY_DONE capture={} tables={} position={}", name_, codes.size(), row->gtid);
      row = store_.Read(name_);
      break;
    }
    if (!clock.SleepFor(Millis(200), stop)) return;
    renew();
  }

  // RUNNING: read the binlog from the checkpoint. The events name the copy they follow.
  ectx.schema = SchemaToken(row->copy_events);
  spdlog::debug("CAPTURE_PREFLIGHT capture={} position={}", name_, row->gtid);
  Preflight(name_, capture_, env_.source_url, row->gtid);
  spdlog::debug("CAPTURE_PREFLIGHT_DONE capture={}", name_);
  storage::ConnectionPool source(source_url, OnePool());
  std::map<std::string, TableKey> keys;
  for (const std::string& table : capture_.tables) {
    keys.emplace(table, DescribeKey(source, name_, capture_.source, table));
  }
  SourceCatalog catalog(source_url.schema, std::move(keys));
  catalog.SetPaused(PausedSet(row->paused));
  BinlogStream stream(source_url, CaptureServerId(env_.service, name_), catalog, {.heartbeat = o.heartbeat});
  GtidPosition position = GtidPosition::Parse(row->gtid);
  std::string file = row->file;
  int64_t pos = row->pos;
  spdlog::debug("CAPTURE_OPENING capture={}", name_);
  stream.Open(row->gtid);
  spdlog::info("CAPTURE_STARTED capture={} holder={} token={} position={} paused={}", name_, env_.holder, token,
               row->gtid.empty() ? "(start)" : row->gtid, row->paused.dump());

  std::set<std::string> table_set(capture_.tables.begin(), capture_.tables.end());
  TransactionAssembler assembler(table_set);
  std::vector<CapturedTransaction> batch;
  std::map<std::string, std::string> new_pauses;
  size_t batch_keys = 0;
  int64_t batch_rows = 0;
  bool advanced = false;
  // The previous batch's keyed events, while any of them may still run (group commit).
  std::vector<std::string> in_flight;
  auto last_flight_look = clock.Now();
  bool held = false;
  auto previous_running = [&] {
    if (in_flight.empty()) return false;
    if (clock.Now() - last_flight_look < Millis(20)) return true;
    last_flight_look = clock.Now();
    std::vector<std::string> still;
    for (const auto& [code, status] : store_.EventStatuses(in_flight)) {
      const std::optional<events::EventStatus> st = events::ParseEventStatus(status.first);
      if (!st || !events::IsTerminal(*st)) still.push_back(code);
    }
    in_flight = std::move(still);
    return !in_flight.empty();
  };
  auto first_pending = clock.Now();
  auto last_commit = clock.Now();
  auto last_look = clock.Now();

  auto commit = [&] {
    std::vector<CapturedTransaction> with_keys;
    for (auto& t : batch) {
      if (!t.keys.empty()) with_keys.push_back(std::move(t));
    }
    std::vector<events::NewEventRow> evs = KeyedSyncEvents(ectx, with_keys);
    Checkpoint cp;
    cp.gtid = position.Text();
    cp.file = file;
    cp.pos = pos;
    cp.state = "RUNNING";
    cp.pause = new_pauses;
    cp.transactions = static_cast<int64_t>(batch.size());
    cp.row_changes = batch_rows;
    if (!batch.empty() && batch.back().committed_at != 0) cp.last_commit_at_s = batch.back().committed_at;
    store_.Commit(name_, env_.holder, token, o.lease_ttl, margin, cp, evs);
    if (!evs.empty()) {
      in_flight.clear();
      for (const auto& e : evs) in_flight.push_back(e.code);
      last_flight_look = clock.Now();
    }
    held = false;
    stats_.commits++;
    stats_.transactions += batch.size();
    stats_.row_changes += static_cast<uint64_t>(batch_rows);
    stats_.events += evs.size();
    if (cp.last_commit_at_s != 0) stats_.last_commit_at_s = cp.last_commit_at_s;
    spdlog::debug("CAPTURE_COMMIT capture={} position={} transactions={} rows={} events={}", name_, cp.gtid, batch.size(),
                  batch_rows, evs.size());
    batch.clear();
    new_pauses.clear();
    batch_keys = 0;
    batch_rows = 0;
    advanced = false;
    last_commit = clock.Now();
    last_renew = clock.Now();  // the commit proved the lease under the token
  };

  while (!stop.stop_requested()) {
    const BinlogItem item = stream.Next();
    if (auto t = assembler.Feed(item)) {
      for (const auto& [table, reason] : t->pause) {
        if (catalog.paused().count(table)) continue;
        catalog.Pause(table);
        new_pauses[table] = reason;
        spdlog::warn("CAPTURE_TABLE_PAUSED capture={} table={} gtid={} reason=\"{}\" action=\"align the target, then: "
                     "dsync capture resume {}\"", name_, table, t->GtidText(), reason, name_);
      }
      for (const auto& [table, _] : new_pauses) t->keys.erase(table);
      position.Advance(t->domain, t->server, t->sequence);
      file = t->file;
      pos = static_cast<int64_t>(t->end_pos);
      advanced = true;
      if (batch_keys == 0 && !t->keys.empty()) first_pending = clock.Now();
      for (const auto& [_, k] : t->keys) batch_keys += k.size();
      batch_rows += t->row_changes;
      batch.push_back(std::move(*t));
    }
    const auto now = clock.Now();
    bool keys_due = batch_keys > 0 && (now - first_pending >= o.flush_interval || batch_keys >= o.max_batch_keys);
    if (keys_due && batch_keys < o.max_batch_keys && now - first_pending < o.max_hold && previous_running()) {
      keys_due = false;
      if (!held) stats_.held++;
      held = true;
    }
    const bool position_due = advanced && (now - last_commit >= o.checkpoint_interval || !new_pauses.empty());
    if (keys_due || position_due) commit();
    if (clock.Now() - last_renew >= renew_every) renew();
    if (clock.Now() - last_look >= Millis(1000)) {
      last_look = clock.Now();
      // An operator's resume clears paused tables: read them back.
      if (auto now_row = store_.Read(name_)) {
        std::set<std::string> paused = PausedSet(now_row->paused);
        for (const auto& [table, _] : new_pauses) paused.insert(table);
        std::vector<std::string> resumed;
        for (const std::string& t : catalog.paused()) {
          if (!paused.count(t)) resumed.push_back(t);
        }
        if (!resumed.empty()) {
          // The resumed tables' changes while they were paused were skipped: copy them
          // in full, reading nothing meanwhile, then read on from this checkpoint, as
          // at the start (docs/capture.md "Resume").
          if (advanced || batch_keys > 0) commit();
          const std::string salt = std::to_string(token) + ":" + position.Text();
          std::vector<events::NewEventRow> copies = CopyEvents(ectx, resumed, position.Text(), salt);
          json codes = json::array();
          for (const auto& e : copies) codes.push_back(e.code);
          Checkpoint cp;
          cp.gtid = position.Text();
          cp.file = file;
          cp.pos = pos;
          cp.state = "COPYING";
          cp.copy_events = codes;
          store_.Commit(name_, env_.holder, token, o.lease_ttl, margin, cp, copies);
          spdlog::info("CAPTURE_TABLES_RESUMED capture={} tables={} position={} copy_events={}", name_,
                       json(resumed).dump(), cp.gtid, codes.dump());
          return;
        }
      }
    }
  }
  if (advanced || batch_keys > 0) commit();  // a clean stop keeps what was read
}

}  // namespace dsync::capture
