-- dsync schema, version 12: batches that name a completion event (seed 001's
-- scatter-and-aggregate: one trigger, N independent events, one aggregator event once
-- all of them are terminal).
--
-- One row per batch that wants a completion event. Written by `POST /v1/batches` with
-- `on_complete`, `dsync produce --file ... --on-complete-topic T`, or a plain-SQL
-- producer:
--   INSERT INTO distribute_batch (batch_code, on_complete_topic, on_complete_payload)
--   VALUES ('orders-2026-11-24', 'ORDERS_DONE', '{"report": "daily"}');
-- in the same transaction as the batch's events, or after them (a row visible before
-- all its events are written could complete early: set expected_events then).
--
-- The dispatcher leader reads the OPEN rows every dispatcher.batch_check_interval_ms
-- and counts each batch's events with one GROUP BY status over idx_batch_code. When
-- the batch has events (at least expected_events, when set) and all are terminal, one
-- transaction inserts the completion event, code derived from the batch code
-- (events/batches.h: "done:<batch_code>"), payload = on_complete_payload plus
-- {"batch": {"code", "total", "by_status"}}, and marks the row COMPLETED with the
-- counts. uk_code on distribute_event makes the insert idempotent whatever happens to
-- the leader in between.
CREATE TABLE IF NOT EXISTS distribute_batch (
  batch_code          VARCHAR(64) NOT NULL PRIMARY KEY COMMENT 'distribute_event.batch_code of its events',
  tenant_id           VARCHAR(30) NOT NULL DEFAULT '0' COMMENT 'tenant_id of the completion event',
  on_complete_topic   VARCHAR(50) NOT NULL COMMENT 'topic of the completion event',
  on_complete_payload LONGTEXT NULL COMMENT 'JSON object; the batch counts are added under "batch"',
  expected_events     INT NULL COMMENT 'complete only once at least this many events exist; NULL: at least one',
  status              VARCHAR(16) NOT NULL DEFAULT 'OPEN' COMMENT 'OPEN or COMPLETED',
  completion_code     VARCHAR(64) NULL COMMENT 'code of the completion event produced',
  counts              TEXT NULL COMMENT 'JSON {status: events} when the batch completed',
  create_time         DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  completed_time      DATETIME(3) NULL,
  KEY idx_status (status, batch_code)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='batches with a completion event';
