-- dsync schema, version 25: continuous sync from a source's binlog (docs/capture.md).
-- One row per capture of a service: its reader's lease (holder, token, expiry on the
-- database clock), its checkpoint (the GTID position after the last transaction whose
-- events are stored, with the binlog file and offset it ended at) and its state.
-- The checkpoint is written in the same transaction as the events produced from the
-- transactions before it, fenced by the holder's token (capture/capture_store.cc): a
-- reader that lost its lease commits nothing, and a position and its events are never
-- apart. Every statement on it lives in capture/capture_store.cc.
CREATE TABLE IF NOT EXISTS dsync_capture (
  service          VARCHAR(128) NOT NULL,
  name             VARCHAR(64) NOT NULL,
  source_ds        VARCHAR(64) NOT NULL,
  target_ds        VARCHAR(64) NOT NULL,
  state            VARCHAR(16) NOT NULL DEFAULT 'NEW' COMMENT 'NEW, COPYING, RUNNING, PAUSED, FAILED',
  gtid             VARCHAR(2048) NULL COMMENT 'GTID position after the last captured transaction (domain-server-seq,...)',
  binlog_file      VARCHAR(255) NULL,
  binlog_pos       BIGINT NULL,
  holder           VARCHAR(191) NULL COMMENT 'the reader holding the lease',
  token            BIGINT NOT NULL DEFAULT 0 COMMENT 'fencing token: raised whenever the lease changes hands',
  lease_until      DATETIME(3) NOT NULL DEFAULT '1970-01-01 00:00:00.000' COMMENT 'database clock',
  paused_tables    TEXT NULL COMMENT 'JSON object table -> reason (a DDL seen on it)',
  copy_events      TEXT NULL COMMENT 'JSON array of the initial copy''s event codes',
  last_error       VARCHAR(1000) NULL,
  last_commit_at   DATETIME(3) NULL COMMENT 'source commit time of the last captured transaction',
  transactions     BIGINT NOT NULL DEFAULT 0,
  row_changes      BIGINT NOT NULL DEFAULT 0,
  events_produced  BIGINT NOT NULL DEFAULT 0,
  reader_starts    BIGINT NOT NULL DEFAULT 0,
  created_at       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (service, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
