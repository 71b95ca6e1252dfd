-- dsync schema, version 20: the relay of a table_sync step between two datasources no
-- single node reaches (docs/relay.md). The framework database is the one thing every
-- node reaches, so the two halves of a relayed step meet here:
--   dsync_relay        one row per relayed step: the two halves' fences, the epoch,
--                      both sides' table shapes, the window and its use, counters
--   dsync_relay_range  the target's range checksums (and row hashes when asked for),
--                      and the source half's verdict on each
--   dsync_relay_chunk  rows on their way from the source half to the target half
--                      (table/relay_codec.h), deleted once applied in the target
-- Every statement on them lives in table/relay_table.cc. Codes are VARBINARY: compared
-- byte for byte, without padding, on MariaDB and MySQL alike (as V015's keys).
CREATE TABLE IF NOT EXISTS dsync_relay (
  step_code        VARBINARY(512) NOT NULL,
  event_code       VARBINARY(512) NOT NULL,
  step_name        VARCHAR(64) NOT NULL,
  table_name       VARCHAR(64) NOT NULL,
  source_ds        VARCHAR(64) NOT NULL,
  target_ds        VARCHAR(64) NOT NULL,
  epoch            INT NOT NULL DEFAULT 0 COMMENT 'raised by every target-half takeover; older ranges and chunks are void',
  target_attempt   INT NOT NULL DEFAULT 0 COMMENT 'fence of the target half (its claim attempt)',
  source_attempt   INT NOT NULL DEFAULT 0 COMMENT 'fence of the source half (its claim attempt)',
  target_node      VARCHAR(128) NULL,
  source_node      VARCHAR(128) NULL,
  target_schema    MEDIUMTEXT NULL COMMENT 'the target table''s shape, JSON',
  source_schema    MEDIUMTEXT NULL COMMENT 'the source table''s shape, JSON',
  state            VARCHAR(16) NOT NULL DEFAULT 'OPEN' COMMENT 'OPEN, SOURCE_DONE, DONE, FAILED',
  error            VARCHAR(1000) NULL,
  window_bytes     BIGINT NOT NULL,
  bytes_in_flight  BIGINT NOT NULL DEFAULT 0,
  peak_bytes       BIGINT NOT NULL DEFAULT 0,
  bytes_relayed    BIGINT NOT NULL DEFAULT 0,
  chunks_relayed   INT NOT NULL DEFAULT 0,
  rows_relayed     BIGINT NOT NULL DEFAULT 0,
  created_at       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (step_code)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS dsync_relay_range (
  step_code        VARBINARY(512) NOT NULL,
  epoch            INT NOT NULL,
  range_no         INT NOT NULL,
  lo_key           MEDIUMTEXT NULL COMMENT 'JSON array of key cells; NULL: from the first key',
  hi_key           MEDIUMTEXT NULL COMMENT 'JSON array of key cells; NULL: open above',
  target_rows      BIGINT NOT NULL,
  target_checksum  VARCHAR(64) NOT NULL,
  state            VARCHAR(16) NOT NULL DEFAULT 'PUBLISHED' COMMENT 'PUBLISHED, EQUAL, HASHES_WANTED, HASHES, SENDING, SENT, APPLIED',
  target_hashes    LONGBLOB NULL,
  sent_hi          MEDIUMTEXT NULL COMMENT 'the source half''s progress inside the range',
  PRIMARY KEY (step_code, epoch, range_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS dsync_relay_chunk (
  step_code        VARBINARY(512) NOT NULL,
  epoch            INT NOT NULL,
  chunk_no         INT NOT NULL,
  range_no         INT NOT NULL,
  last_of_range    TINYINT NOT NULL DEFAULT 0,
  row_count        INT NOT NULL,
  bytes            INT NOT NULL,
  data             LONGBLOB NOT NULL,
  created_at       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (step_code, epoch, chunk_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
