// The binlog connection of a capture (capture/binlog_stream.h) over libmariadb's
// replication API. How the session is set up, as a MariaDB replica does:
//   SET @mariadb_slave_capability=4          GTID events, annotated rows understood
//   SET @master_binlog_checksum=@@global...   checksums as the server writes them
//   SET @slave_connect_state='<gtid list>'   start after these transactions
//   SET @master_heartbeat_period=<ns>         heartbeats while there is nothing to send
// then COM_BINLOG_DUMP (mariadb_rpl_open) with the capture's server id; the server
// ignores the file name and offset once a connect state is set.
//
// Thread safety: see the header.
#include "capture/binlog_stream.h"

#include <mysql.h>
#include <mariadb_rpl.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string_view>

namespace dsync::capture {
namespace {

constexpr unsigned kErrorPurged = 1236;         // ER_MASTER_FATAL_ERROR_READING_BINLOG
constexpr unsigned kErrorAccessDenied = 1045;
constexpr unsigned kErrorNoPrivilege = 1227;    // ER_SPECIFIC_ACCESS_DENIED_ERROR
constexpr unsigned kErrorUnknownVariable = 1193;

std::string_view View(const MARIADB_STRING& s) { return {s.str == nullptr ? "" : s.str, s.length}; }

StreamError::Kind KindOf(unsigned code) {
  if (code == kErrorPurged) return StreamError::Kind::kPurged;
  if (code == kErrorAccessDenied || code == kErrorNoPrivilege) return StreamError::Kind::kRefused;
  return StreamError::Kind::kConnection;
}

}  // namespace

// A mapped table: its name and columns, kept until the next transaction.
struct MappedTable {
  std::string schema, table;
  std::vector<MappedColumn> columns;
};

struct BinlogStream::Impl {
  storage::DbUrl url;
  uint32_t server_id;
  KeyCatalog& catalog;
  StreamOptions options;
  MYSQL* mysql = nullptr;
  MARIADB_RPL* rpl = nullptr;
  MARIADB_RPL_EVENT* event = nullptr;
  std::string file;
  std::map<uint64_t, MappedTable> tables;

  Impl(storage::DbUrl u, uint32_t id, KeyCatalog& c, StreamOptions o)
      : url(std::move(u)), server_id(id), catalog(c), options(o) {}

  ~Impl() { Close(); }

  void Close() {
    if (event != nullptr) mariadb_free_rpl_event(event);
    event = nullptr;
    if (rpl != nullptr) mariadb_rpl_close(rpl);
    rpl = nullptr;
    if (mysql != nullptr) mysql_close(mysql);
    mysql = nullptr;
    tables.clear();
  }

  [[noreturn]] void Fail(const std::string& what, unsigned code, const std::string& message) {
    const std::string text = "binlog of " + url.hosts[0].Label() + ": " + what + ": " + storage::MaskPasswords(message) +
                             " (" + std::to_string(code) + ")";
    Close();
    throw StreamError(KindOf(code), text);
  }

  void Query(const std::string& sql) {
    if (mysql_query(mysql, sql.c_str()) != 0) {
      Fail("\"" + sql.substr(0, sql.find('=')) + "\" failed", mysql_errno(mysql), mysql_error(mysql));
    }
  }

  void Open(const std::string& gtid) {
    Close();
    mysql = mysql_init(nullptr);
    if (mysql == nullptr) throw StreamError(StreamError::Kind::kConnection, "binlog: out of memory");
    const unsigned connect_s = static_cast<unsigned>(std::max<int64_t>(1, options.connect_timeout.count() / 1000));
    // Four heartbeats of silence: the connection is gone.
    const unsigned read_s = static_cast<unsigned>(std::max<int64_t>(2, options.heartbeat.count() * 4 / 1000));
    mysql_optionsv(mysql, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
    mysql_optionsv(mysql, MYSQL_OPT_READ_TIMEOUT, &read_s);
    mysql_optionsv(mysql, MYSQL_OPT_WRITE_TIMEOUT, &read_s);
    const storage::DbHost& host = url.hosts[0];
    const char* socket = url.socket.empty() ? nullptr : url.socket.c_str();
    if (mysql_real_connect(mysql, host.name.c_str(), url.user.c_str(), url.password.c_str(), nullptr,
                           static_cast<unsigned>(host.port), socket, 0) == nullptr) {
      Fail("cannot connect", mysql_errno(mysql), mysql_error(mysql));
    }
    // A GTID list is digits, '-' and ','; anything else never reaches the statement.
    for (char c : gtid) {
      if (!((c >= '0' && c <= '9') || c == '-' || c == ',')) {
        throw StreamError(StreamError::Kind::kFormat, "binlog: bad GTID position '" + gtid.substr(0, 64) + "'");
      }
    }
    Query("SET @mariadb_slave_capability=4");
    Query("SET @master_binlog_checksum=@@global.binlog_checksum");
    Query("SET @slave_connect_state='" + gtid + "'");
    Query("SET @master_heartbeat_period=" + std::to_string(options.heartbeat.count() * 1000000LL));
    rpl = mariadb_rpl_init(mysql);
    if (rpl == nullptr) Fail("mariadb_rpl_init", mysql_errno(mysql), mysql_error(mysql));
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_SERVER_ID, server_id);
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_START, static_cast<unsigned long>(4));
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_FILENAME, "", static_cast<size_t>(0));
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_FLAGS, static_cast<unsigned int>(0));
    if (mariadb_rpl_open(rpl) != 0) {
      const unsigned code = mysql_errno(mysql) != 0 ? mysql_errno(mysql) : mariadb_rpl_errno(rpl);
      Fail("COM_BINLOG_DUMP refused", code, mysql_errno(mysql) != 0 ? mysql_error(mysql) : mariadb_rpl_error(rpl));
    }
  }

  BinlogItem Next() {
    if (rpl == nullptr) throw StreamError(StreamError::Kind::kConnection, "binlog: not open");
    event = mariadb_rpl_fetch(rpl, event);
    if (event == nullptr) {
      unsigned code = mysql_errno(mysql);
      std::string message = code != 0 ? mysql_error(mysql) : "";
      if (code == 0) {
        code = mariadb_rpl_errno(rpl);
        message = mariadb_rpl_error(rpl);
      }
      if (code == 0) message = "the server ended the binlog stream";
      Fail("reading", code, message);
    }
    BinlogItem item;
    item.timestamp = event->timestamp;
    item.end_pos = event->next_event_pos;
    switch (event->event_type) {
      case ROTATE_EVENT:
        file.assign(View(event->event.rotate.filename));
        item.end_pos = event->event.rotate.position;
        break;
      case GTID_EVENT:
        tables.clear();  // every transaction maps the tables it touches again
        item.type = BinlogItem::Type::kGtid;
        item.domain = event->event.gtid.domain_id;
        item.server = event->server_id;
        item.sequence = event->event.gtid.sequence_nr;
        item.standalone = (event->event.gtid.flags & FL_STANDALONE) != 0;
        break;
      case XID_EVENT:
        item.type = BinlogItem::Type::kCommit;
        break;
      case QUERY_EVENT: {
        const std::string_view sql = View(event->event.query.statement);
        if (sql == "COMMIT") {
          item.type = BinlogItem::Type::kCommit;
        } else if (sql != "BEGIN") {
          item.type = BinlogItem::Type::kQuery;
          item.schema.assign(View(event->event.query.database));
          item.text.assign(sql);
        }
        break;
      }
      case TABLE_MAP_EVENT: {
        MappedTable t;
        t.schema.assign(View(event->event.table_map.database));
        t.table.assign(View(event->event.table_map.table));
        try {
          t.columns = ParseColumns(View(event->event.table_map.column_types), View(event->event.table_map.metadata));
        } catch (const RowFormatError& e) {
          throw StreamError(StreamError::Kind::kFormat, "binlog: TABLE_MAP of " + t.schema + "." + t.table + ": " + e.what());
        }
        tables[event->event.table_map.table_id] = std::move(t);
        break;
      }
      case HEARTBEAT_LOG_EVENT:
        item.type = BinlogItem::Type::kHeartbeat;
        break;
      default:
        if (IS_ROW_EVENT(event)) Rows(item);
        break;
    }
    item.file = file;
    return item;
  }

  void Rows(BinlogItem& item) {
    const auto& rows = event->event.rows;
    auto found = tables.find(rows.table_id);
    if (found == tables.end()) {
      throw StreamError(StreamError::Kind::kFormat, "binlog: a ROWS event of table id " + std::to_string(rows.table_id) +
                                                        " without its TABLE_MAP");
    }
    const MappedTable& t = found->second;
    const TableKey* key = catalog.Keys(t.schema, t.table);
    if (key == nullptr) return;  // not captured
    item.schema = t.schema;
    item.table = t.table;
    if (t.columns.size() != key->column_count || rows.column_count != t.columns.size()) {
      item.type = BinlogItem::Type::kShapeChange;
      item.text = "the binlog has " + std::to_string(t.columns.size()) + " columns for it, the table has " +
                  std::to_string(key->column_count);
      return;
    }
    RowsKind kind = rows.type == UPDATE_ROWS ? RowsKind::kUpdate : rows.type == DELETE_ROWS ? RowsKind::kDelete
                                                                                             : RowsKind::kWrite;
    try {
      item.keys = RowKeys(t.columns, key->columns, kind, rows.column_bitmap,
                          kind == RowsKind::kUpdate ? rows.column_update_bitmap : nullptr,
                          static_cast<const uint8_t*>(rows.row_data), rows.row_data_size);
    } catch (const RowFormatError& e) {
      item.type = BinlogItem::Type::kShapeChange;
      item.text = e.what();
      return;
    }
    item.rows = static_cast<int64_t>(kind == RowsKind::kUpdate ? item.keys.size() / 2 : item.keys.size());
    item.type = BinlogItem::Type::kRows;
  }
};

BinlogStream::BinlogStream(storage::DbUrl url, uint32_t server_id, KeyCatalog& catalog, StreamOptions options)
    : impl_(std::make_unique<Impl>(std::move(url), server_id, catalog, options)) {}
BinlogStream::~BinlogStream() = default;
void BinlogStream::Open(const std::string& gtid_position) { impl_->Open(gtid_position); }
BinlogItem BinlogStream::Next() { return impl_->Next(); }
void BinlogStream::Close() { impl_->Close(); }

uint32_t CaptureServerId(const std::string& service, const std::string& capture) {
  // FNV-1a over "service\0capture": stable across builds and platforms.
  uint32_t h = 2166136261u;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 16777619u;
  };
  mix(service);
  mix(std::string_view("\0", 1));
  mix(capture);
  return (1u << 30) | (h & ((1u << 30) - 1));
}

}  // namespace dsync::capture
