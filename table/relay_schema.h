// What one half of a relayed sync tells the other about its table (table/relay.h):
// the table's columns and key (TableSchema) and its shape (TableShape, the preflight's
// view), as one JSON document in the relay row (dsync_relay.source_schema /
// target_schema). Each half then builds the same Plan from its own table and the
// other's document (table::MakePlan, table::Preflight) as direct mode builds it from
// both databases: the same synced columns, the same checks, the same row-hash form.
//
//   std::string doc = table::RelaySchemaJson(schema, shape);
//   table::RelaySchema other = table::ParseRelaySchema(doc);   // throws RelayFormatError
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "table/preflight.h"
#include "table/sql.h"

namespace dsync::table {

struct RelaySchema {
  TableSchema schema;
  TableShape shape;
};

std::string RelaySchemaJson(const TableSchema& schema, const TableShape& shape);
// Throws RelayFormatError (table/relay_codec.h) naming what is malformed.
RelaySchema ParseRelaySchema(const std::string& json);

}  // namespace dsync::table
