-- The knowledge-base schema of the demo's two environments (env_a, env_b), run once in
-- each. The tables are what config/dsync.example.json's SPACE_ADD plan syncs: one
-- space, its documents, their tags, the space's permissions. Every table has a
-- primary key (table_sync upserts by it; kb_tag's is composite) and a space_id column
-- (or id, for kb_space) that the steps' `where` filters on.

CREATE TABLE kb_space (
  id           BIGINT       NOT NULL PRIMARY KEY,
  tenant_id    VARCHAR(64)  NOT NULL,
  space_key    VARCHAR(32)  NOT NULL,
  name         VARCHAR(200) NOT NULL,
  description  TEXT         NULL,
  owner        VARCHAR(128) NOT NULL,
  visibility   ENUM('public', 'internal', 'private') NOT NULL DEFAULT 'internal',
  created_at   DATETIME(3)  NOT NULL,
  updated_at   DATETIME(3)  NOT NULL,
  archived_at  DATETIME(3)  NULL,
  UNIQUE KEY uk_space_key (space_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE kb_doc (
  id           BIGINT       NOT NULL PRIMARY KEY,
  space_id     BIGINT       NOT NULL,
  parent_id    BIGINT       NULL,
  title        VARCHAR(255) NOT NULL,
  slug         VARCHAR(255) NOT NULL,
  body         MEDIUMTEXT   NOT NULL,
  format       ENUM('markdown', 'html') NOT NULL DEFAULT 'markdown',
  version      INT          NOT NULL DEFAULT 1,
  author       VARCHAR(128) NOT NULL,
  created_at   DATETIME(3)  NOT NULL,
  updated_at   DATETIME(3)  NOT NULL,
  published_at DATETIME(3)  NULL,
  KEY idx_space (space_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE kb_tag (
  doc_id       BIGINT       NOT NULL,
  name         VARCHAR(64)  NOT NULL,
  space_id     BIGINT       NOT NULL,
  color        CHAR(7)      NULL,
  created_at   DATETIME(3)  NOT NULL,
  PRIMARY KEY (doc_id, name),
  KEY idx_space (space_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE kb_permission (
  id             BIGINT       NOT NULL PRIMARY KEY,
  space_id       BIGINT       NOT NULL,
  principal_type ENUM('user', 'group', 'app') NOT NULL,
  principal      VARCHAR(191) NOT NULL,
  role           ENUM('viewer', 'editor', 'admin') NOT NULL,
  granted_by     VARCHAR(128) NULL,
  granted_at     DATETIME(3)  NOT NULL,
  expires_at     DATETIME(3)  NULL,
  KEY idx_space (space_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
