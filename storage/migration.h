// One schema migration as built into the binary (sql/migrations/V<version>__<name>.sql),
// apart from the migrator so that the generated table of them (sql/embed_migrations.cmake)
// compiles without the database headers.
#pragma once

#include <string>
#include <vector>

namespace dsync::storage {

struct Migration {
  int version;
  std::string name;
  std::string text;
};

// The migrations built into this binary, ascending by version.
const std::vector<Migration>& EmbeddedMigrations();

}  // namespace dsync::storage
