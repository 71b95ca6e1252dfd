// Parsing of database URLs:
//
//   mysql://user:pass@host:port/schema?option=value&...
//   mysql://user:pass@localhost/schema?socket=/run/mysqld/mysqld.sock
//
// User, password and schema are percent-decoded ("p%40ss" is "p@ss"). Options:
//   socket=PATH              connect through a unix socket instead of TCP
//   pool_size=N              connections in the pool (default 8, 1..256)
//   connect_timeout_ms=N     default 5000
//   read_timeout_ms=N        default 30000; a dead server cannot hang a thread longer
//   write_timeout_ms=N       default 30000
// Unknown options are rejected. Port defaults to 3306. IPv6 hosts go in brackets.
//
// Masked() is the only form that may be logged or printed: the password becomes ***.
//
// Thread safety: value type.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace dsync::storage {

struct DbUrl {
  std::string user;
  std::string password;
  std::string host;
  int port = 3306;
  std::string schema;
  std::string socket;  // empty: TCP
  int pool_size = 8;
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds read_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  // Not from the URL: set by the app (registry.offline_timeout_ms). The server ends a
  // session whose transaction stays idle this long (MariaDB idle_transaction_timeout;
  // MySQL has none and ignores it): a process frozen inside a transaction (SIGSTOP, a
  // VM pause) would otherwise hold its row locks, and so its events, for as long as it
  // stays frozen. 0: the server's default (none).
  std::chrono::seconds idle_transaction_timeout{0};

  // Throws UsageError with a one-line reason (never containing the password).
  static DbUrl Parse(std::string_view url);

  // mysql://user:***@host:port/schema?... — safe to log.
  std::string Masked() const;
  // The same URL pointing at another schema (used by tests and datasources).
  DbUrl WithSchema(std::string schema_name) const;
};

// Replaces the password of anything that looks like a URL with userinfo by ***.
// For free text that may embed a URL (error messages from other libraries).
std::string MaskPasswords(std::string_view text);

}  // namespace dsync::storage
