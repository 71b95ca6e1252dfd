-- dsync schema, version 11: retention (docs/configuration.md "retention", `dsync purge`).
--
-- Finished events (SUCCESS, COMPENSATED, FAILED) and their steps older than the
-- retention bound are deleted by the dispatcher leader in small batches (events/purge.h),
-- or moved here first when retention.archive is true (or `dsync purge --archive`).
-- The archive tables have the same columns as the live ones (built LIKE them), so a
-- query written for distribute_event runs on distribute_event_archive unchanged; a
-- later migration that adds a column to a live table adds it here too (the purge copies
-- the columns both tables have, by name, so an archive missing one still works).
--
-- Differences from the live tables: no unique key on `code` (the live table's uk_code
-- is what makes producing idempotent; after a purge the same code may be produced
-- again and archived again, and the archive must accept both rows) and none of the
-- dispatch indexes, which serve no query on finished rows. Reads go by code, event
-- code (steps), creation time and batch.
CREATE TABLE IF NOT EXISTS distribute_event_archive LIKE distribute_event;

CREATE TABLE IF NOT EXISTS distribute_event_step_archive LIKE distribute_event_step;

-- One index change per statement: a rerun after an interruption gets 1091 / 1061 for
-- what is already done, which the migrator counts as done.
ALTER TABLE distribute_event_archive DROP KEY uk_code;

ALTER TABLE distribute_event_archive ADD KEY idx_code (code);

ALTER TABLE distribute_event_archive DROP KEY idx_due;

ALTER TABLE distribute_event_archive DROP KEY idx_entity_status;

ALTER TABLE distribute_event_archive DROP KEY idx_node_address;

ALTER TABLE distribute_event_step_archive DROP KEY uk_code;

ALTER TABLE distribute_event_step_archive ADD KEY idx_code (code);

ALTER TABLE distribute_event_archive COMMENT = 'finished events moved out of distribute_event by retention (same columns)';

ALTER TABLE distribute_event_step_archive COMMENT = 'steps of archived events (same columns as distribute_event_step)';

-- v_events_all: live and archived events in one view, `stored` saying where each row
-- is ('live' or 'archive'). An event can appear in both only if its code was produced
-- again after the first one was archived.
CREATE OR REPLACE VIEW v_events_all AS
SELECT 'live' AS stored, e.id, e.code, e.topic, e.tenant_id, e.data_id, e.status, e.phase,
  e.node_address, e.attempt, e.retry_count, e.max_retry, e.version, e.priority, e.batch_code,
  e.trace_id, e.payload, e.result, e.last_error, e.process_log, e.progress,
  e.create_time, e.next_run_time, e.assigned_time, e.started_time, e.finished_time, e.modifier_time
FROM distribute_event e
UNION ALL
SELECT 'archive' AS stored, a.id, a.code, a.topic, a.tenant_id, a.data_id, a.status, a.phase,
  a.node_address, a.attempt, a.retry_count, a.max_retry, a.version, a.priority, a.batch_code,
  a.trace_id, a.payload, a.result, a.last_error, a.process_log, a.progress,
  a.create_time, a.next_run_time, a.assigned_time, a.started_time, a.finished_time, a.modifier_time
FROM distribute_event_archive a;

-- v_steps_all: the same for steps.
CREATE OR REPLACE VIEW v_steps_all AS
SELECT 'live' AS stored, s.id, s.code, s.job_code, s.sort, s.parent_step_id, s.step_name, s.step_type,
  s.status, s.retry_count, s.compensation_retry_count, s.node_address, s.attempt, s.started_at,
  s.executed_at, s.compensated_at, s.error_details, s.output
FROM distribute_event_step s
UNION ALL
SELECT 'archive' AS stored, a.id, a.code, a.job_code, a.sort, a.parent_step_id, a.step_name, a.step_type,
  a.status, a.retry_count, a.compensation_retry_count, a.node_address, a.attempt, a.started_at,
  a.executed_at, a.compensated_at, a.error_details, a.output
FROM distribute_event_step_archive a;
