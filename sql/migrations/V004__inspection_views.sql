-- dsync schema, version 4: what the saga engine records beyond V2, and the
-- inspection views operators query with plain SQL (README: "Inspecting events").
--
-- distribute_event_step.output: the JSON a step returned on SUCCESS (its `payload`
-- column holds the step's input params; compensation_data what undoing it needs).
ALTER TABLE distribute_event_step
  ADD COLUMN output LONGTEXT NULL COMMENT 'JSON the step returned on SUCCESS';

-- Step codes are "<event code>#<position>" and children "<parent code>.<n>": an event
-- code may use all 64 characters of distribute_event.code, so the step code needs room.
-- Re-running this MODIFY is harmless.
ALTER TABLE distribute_event_step
  MODIFY COLUMN code VARCHAR(128) NOT NULL COMMENT 'deterministic: <event code>#<position>[.<child n>]; the idempotency key';

-- The views compare with UTC_TIMESTAMP(3), not NOW(3): every stored time is UTC
-- (dsync sessions run with time_zone '+00:00'), while an operator's session may not.
--
-- v_event_progress: one row per event. steps_done = steps SUCCESS now (it falls
-- again while a compensation undoes them), steps_compensated, steps_total = rows of
-- the plan (children included); age_s since creation, idle_s since last activity.
CREATE OR REPLACE VIEW v_event_progress AS
SELECT e.id, e.code, e.topic, e.tenant_id, e.data_id, e.status, e.phase,
  (SELECT COUNT(*) FROM distribute_event_step s
    WHERE s.job_code = e.code AND s.status = 'SUCCESS') AS steps_done,
  (SELECT COUNT(*) FROM distribute_event_step s
    WHERE s.job_code = e.code AND s.status = 'COMPENSATED') AS steps_compensated,
  (SELECT COUNT(*) FROM distribute_event_step s WHERE s.job_code = e.code) AS steps_total,
  e.progress, e.node_address, e.attempt, e.retry_count, e.version, e.priority,
  e.create_time, e.started_time, e.finished_time, e.next_run_time,
  TIMESTAMPDIFF(SECOND, e.create_time, UTC_TIMESTAMP(3)) AS age_s,
  TIMESTAMPDIFF(SECOND, e.modifier_time, UTC_TIMESTAMP(3)) AS idle_s,
  e.last_error
FROM distribute_event e;

-- v_step_history: the timeline of every event, one row per action on a step:
-- EXECUTE (started_at .. finished_at = executed_at) and COMPENSATE (finished_at =
-- compensated_at). Read it in order with
--   SELECT * FROM v_step_history WHERE event_code = ? ORDER BY seq;
-- seq orders forward actions by plan position (children after their parent), then
-- compensations by compensated_at (the order they ran in: the reverse), ties broken
-- by reverse plan position; a compensation still in progress comes last.
CREATE OR REPLACE VIEW v_step_history AS
SELECT s.job_code AS event_code,
  CONCAT('1:', LPAD(s.sort, 6, '0'), ':', LPAD(LENGTH(s.code), 3, '0'), ':', s.code) AS seq,
  'EXECUTE' AS action, s.code AS step_code, s.step_name, s.step_type, s.sort,
  s.parent_step_id,
  s.status, s.started_at,
  s.executed_at AS finished_at, s.retry_count AS failures, s.node_address, s.attempt,
  s.error_details, s.output
FROM distribute_event_step s
WHERE s.started_at IS NOT NULL OR s.executed_at IS NOT NULL OR s.retry_count > 0
UNION ALL
SELECT s.job_code AS event_code,
  CONCAT('2:', COALESCE(DATE_FORMAT(s.compensated_at, '%Y%m%d%H%i%s%f'), '99999999999999999999'),
         ':', LPAD(999999 - s.sort, 6, '0'), ':', LPAD(999 - LENGTH(s.code), 3, '0'), ':', s.code) AS seq,
  'COMPENSATE' AS action, s.code AS step_code, s.step_name, s.step_type, s.sort,
  s.parent_step_id,
  s.status, NULL AS started_at,
  s.compensated_at AS finished_at, s.compensation_retry_count AS failures, s.node_address,
  s.attempt, s.error_details, NULL AS output
FROM distribute_event_step s
WHERE s.status IN ('COMPENSATING', 'COMPENSATED') OR s.compensation_retry_count > 0;

-- v_events_needing_attention: FAILED events; events stuck RUNNING/COMPENSATING with
-- no activity for 5 minutes (or ASSIGNED and never claimed for 5 minutes); and
-- compensations that are retrying after a failure.
CREATE OR REPLACE VIEW v_events_needing_attention AS
SELECT e.id, e.code, e.topic, e.status, e.phase,
  CASE
    WHEN e.status = 'FAILED' THEN 'failed'
    WHEN e.status IN ('RUNNING', 'COMPENSATING', 'ASSIGNED')
         AND e.modifier_time < UTC_TIMESTAMP(3) - INTERVAL 5 MINUTE THEN 'stuck'
    ELSE 'compensation_retrying'
  END AS reason,
  e.node_address, e.attempt, e.retry_count, e.modifier_time,
  TIMESTAMPDIFF(SECOND, e.modifier_time, UTC_TIMESTAMP(3)) AS idle_s,
  e.last_error, e.result
FROM distribute_event e
WHERE e.status = 'FAILED'
   OR (e.status IN ('RUNNING', 'COMPENSATING', 'ASSIGNED')
       AND e.modifier_time < UTC_TIMESTAMP(3) - INTERVAL 5 MINUTE)
   OR (e.phase = 'COMPENSATE' AND e.status IN ('PENDING', 'ASSIGNED', 'COMPENSATING')
       AND EXISTS (SELECT 1 FROM distribute_event_step s
                   WHERE s.job_code = e.code AND s.status = 'COMPENSATING'
                     AND s.compensation_retry_count > 0));

-- v_node_load: live nodes (status 1 online or 2 draining, heartbeat within a FIXED
-- 30 s, the default registry.offline_timeout_ms: a view cannot read the config) with
-- their events in flight counted from distribute_event, next to what they report.
CREATE OR REPLACE VIEW v_node_load AS
SELECT r.service_name, r.node_address, r.status, r.last_heartbeat_time,
  TIMESTAMPDIFF(SECOND, r.last_heartbeat_time, UTC_TIMESTAMP(3)) AS heartbeat_age_s,
  IF(JSON_VALID(r.metadata), JSON_UNQUOTE(JSON_EXTRACT(r.metadata, '$.capacity')), NULL) AS capacity,
  IF(JSON_VALID(r.metadata), JSON_UNQUOTE(JSON_EXTRACT(r.metadata, '$.processing_count')), NULL)
    AS reported_processing,
  (SELECT COUNT(*) FROM distribute_event e
    WHERE e.node_address = r.node_address AND e.status = 'ASSIGNED') AS assigned,
  (SELECT COUNT(*) FROM distribute_event e
    WHERE e.node_address = r.node_address AND e.status IN ('RUNNING', 'COMPENSATING')) AS running,
  (SELECT COUNT(*) FROM distribute_event e
    WHERE e.node_address = r.node_address AND e.status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING'))
    AS in_flight
FROM distribute_node_registry r
WHERE r.status IN (1, 2) AND r.last_heartbeat_time >= UTC_TIMESTAMP(3) - INTERVAL 30 SECOND;
