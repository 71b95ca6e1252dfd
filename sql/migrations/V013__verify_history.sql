-- dsync schema, version 13: the history of verify runs (`dsync verify`, POST /v1/verify;
-- api/verify_service.h) and the latest result per (topic or table, filter, table).
--
-- One row per table compared by a run; the rows of one run share run_id. subject is
-- the topic (subject_kind 'topic', filter_text the payload as JSON) or the table
-- (subject_kind 'table', filter_text "<where> <params JSON>"). first_keys holds the
-- first differing keys of each list: {"missing_in_target": [[...]], "extra_in_target":
-- [...], "different": [...]} (each key a JSON array of its primary-key values).
CREATE TABLE IF NOT EXISTS dsync_verify_result (
  id               BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  run_id           VARCHAR(64)  NOT NULL COMMENT 'shared by the tables of one run',
  subject_kind     VARCHAR(8)   NOT NULL COMMENT 'topic | table',
  subject          VARCHAR(128) NOT NULL COMMENT 'topic name or table name',
  filter_text      VARCHAR(2048) NOT NULL COMMENT 'payload JSON (topic) or where + params (table); cut at 2048',
  step_name        VARCHAR(64)  NULL COMMENT 'the table_sync step (topic runs)',
  table_name       VARCHAR(64)  NOT NULL,
  source_ds        VARCHAR(64)  NOT NULL,
  target_ds        VARCHAR(64)  NOT NULL,
  is_equal         TINYINT      NOT NULL,
  source_rows      BIGINT       NOT NULL,
  target_rows      BIGINT       NOT NULL,
  missing_in_target BIGINT      NOT NULL,
  extra_in_target  BIGINT       NOT NULL,
  different        BIGINT       NOT NULL,
  chunks           BIGINT       NOT NULL,
  chunks_differing BIGINT       NOT NULL,
  first_keys       TEXT         NULL COMMENT 'JSON: the first differing keys of each list',
  duration_ms      BIGINT       NOT NULL DEFAULT 0 COMMENT 'of the whole run',
  finished_at      DATETIME(3)  NOT NULL COMMENT 'UTC',
  KEY idx_subject (subject_kind, subject, finished_at),
  KEY idx_finished (finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The latest result per (subject, filter, table, target), with its age by the
-- database clock.
CREATE OR REPLACE VIEW v_verify_latest AS
SELECT r.run_id, r.subject_kind, r.subject, r.filter_text, r.step_name, r.table_name, r.source_ds, r.target_ds,
       r.is_equal, r.source_rows, r.target_rows, r.missing_in_target, r.extra_in_target, r.different,
       r.chunks, r.chunks_differing, r.first_keys, r.finished_at,
       TIMESTAMPDIFF(MICROSECOND, r.finished_at, UTC_TIMESTAMP(3)) / 1000000 AS age_seconds
FROM (
  SELECT v.*, ROW_NUMBER() OVER (PARTITION BY v.subject_kind, v.subject, v.filter_text, v.table_name, v.target_ds
                                 ORDER BY v.id DESC) AS rn
  FROM dsync_verify_result v
) r
WHERE r.rn = 1;
