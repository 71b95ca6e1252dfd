// Parsing of database URLs:
//
//   mysql://user:pass@host:port/schema?option=value&...
//   mysql://user:pass@host1:port1,host2:port2,host3:port3/schema?order=failover
//   mysql://user:pass@localhost/schema?socket=/run/mysqld/mysqld.sock
//
// The host list is a contract (a Galera cluster's members, or a primary and its
// stand-ins): each entry is `name`, `name:port`, `[ipv6]` or `[ipv6]:port` (an IPv6
// address must be in brackets), names are [A-Za-z0-9._-], ports 1..65535 (default
// 3306), no entry may be empty or listed twice. The pool connects to the first host
// that answers and is ready, in list order (`order=failover`, the default) or from a
// start picked per process (`order=random`: spreads processes over the hosts), and
// stays on it while it is healthy (storage/connection_pool.h).
//
// User, password and schema are percent-decoded ("p%40ss" is "p@ss"). The password
// may contain ':' and ',' as they are; '@', '/' and '?' must be percent-encoded
// (%40, %2F, %3F). Options:
//   order=failover|random    host order for new connections (default failover)
//   socket=PATH              connect through a unix socket instead of TCP (one host only)
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
#include <vector>

namespace dsync::storage {

struct DbHost {
  std::string name;  // host name or address; an IPv6 address without its brackets
  int port = 3306;

  // "name:port", "[v6]:port": for logs and messages.
  std::string Label() const;
  bool operator==(const DbHost&) const = default;
};

enum class HostOrder { kFailover, kRandom };

struct DbUrl {
  std::string user;
  std::string password;
  std::vector<DbHost> hosts;  // never empty after Parse
  HostOrder order = HostOrder::kFailover;
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

  // mysql://user:***@host:port,.../schema?... — safe to log.
  std::string Masked() const;
  // The same with the password, percent-encoded: to hand the URL on (a child
  // process's configuration, a test's datasource). Never log it.
  std::string Unmasked() const;
  // The same URL pointing at another schema (used by tests and datasources).
  DbUrl WithSchema(std::string schema_name) const;
};

// Replaces the password of anything that looks like a URL with userinfo by ***.
// For free text that may embed a URL (error messages from other libraries).
std::string MaskPasswords(std::string_view text);

}  // namespace dsync::storage
