-- dsync schema, version 26: captures in v_events_needing_attention (issue 36, docs/capture.md).
--
-- dsync_capture.lag_bound_s: the config's captures.<name>.lag_bound_s (default 10),
-- written by the capture's reader whenever it competes for the lease.
--
-- v_events_needing_attention (V022) with its columns and its rows unchanged, and rows
-- for captures added at the end (UNION ALL), one per capture or paused table:
--   capture_failed        a capture in state FAILED (a refusal while running, a failed
--                         copy): detail says to fix it and run `dsync capture resume`;
--                         last_error is the capture's;
--   capture_table_paused  one row per table of dsync_capture.paused_tables (a DDL, or
--                         a row image that does not fit): detail names the table and why;
--   capture_lagging       a RUNNING capture whose lag exceeds its lag_bound_s. The lag,
--                         in whole seconds: the larger of the age of its oldest keyed-sync
--                         event not yet ended (every change it holds waits at least that
--                         long) and the reader's lag at its last checkpoint (source
--                         commit of the last captured transaction -> the checkpoint;
--                         binlog timestamps have second precision).
-- The capture rows: id NULL, code 'capture:<name>' ('capture:<name>:<table>' for a paused
-- table), topic 'dsync.capture', status the capture's state, phase NULL, node_address the
-- lease holder, modifier_time/idle_s from dsync_capture.updated_at, tenant_id
-- 'dsync.capture', data_id the capture's name. events/rows.cc lists the same rows by
-- the same rules (kAttentionCapture*).
ALTER TABLE dsync_capture ADD COLUMN lag_bound_s INT NOT NULL DEFAULT 10
  COMMENT 'captures.<name>.lag_bound_s: a lag above it is listed in v_events_needing_attention';

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
  e.last_error, e.result, CAST(NULL AS CHAR(1024)) AS detail,
  e.service, e.tenant_id, e.data_id, e.next_run_time, CAST(NULL AS CHAR(64)) AS blocker_code
FROM distribute_event e
WHERE e.status = 'FAILED'
   OR (e.status IN ('RUNNING', 'COMPENSATING', 'ASSIGNED')
       AND e.modifier_time < UTC_TIMESTAMP(3) - INTERVAL 5 MINUTE)
   OR (e.phase = 'COMPENSATE' AND e.status IN ('ASSIGNED', 'COMPENSATING')
       AND EXISTS (SELECT 1 FROM distribute_event_step s
                   WHERE s.job_code = e.code AND s.status = 'COMPENSATING'
                     AND s.compensation_retry_count > 0))
UNION ALL
SELECT x.id, x.code, x.topic, x.status, x.phase,
  CASE
    WHEN x.comp_retrying THEN 'compensation_retrying'
    WHEN tp.topic IS NOT NULL THEN 'paused'
    WHEN u.kind IS NOT NULL THEN u.kind
    WHEN x.no_dispatcher THEN 'no_dispatcher_for_service'
    WHEN b.id IS NOT NULL THEN 'held_behind'
    ELSE 'delayed'
  END AS reason,
  x.node_address, x.attempt, x.retry_count, x.modifier_time,
  TIMESTAMPDIFF(SECOND, x.modifier_time, UTC_TIMESTAMP(3)) AS idle_s,
  x.last_error, x.result,
  CASE
    WHEN x.comp_retrying THEN NULL
    WHEN tp.topic IS NOT NULL THEN CONCAT('topic ', tp.topic, ' paused by ', tp.paused_by, ' at ',
      DATE_FORMAT(tp.paused_at, '%Y-%m-%d %H:%i:%s'), ' UTC', IF(tp.reason = '', '', CONCAT(': ', tp.reason)))
    WHEN u.kind IS NOT NULL THEN u.reason
    WHEN x.no_dispatcher THEN CONCAT('no live dispatcher of service ', x.service,
      ' holds its lease (dispatcher:', x.service, ')')
    WHEN b.id IS NOT NULL THEN CONCAT('held behind ', b.code, ' (',
      CASE
        WHEN b.status <> 'PENDING' THEN CONCAT('stuck: ', b.status, ' on ', IFNULL(b.node_address, '-'),
          ', no activity since ', DATE_FORMAT(b.modifier_time, '%Y-%m-%d %H:%i:%s'))
        WHEN bp.topic IS NOT NULL THEN CONCAT('paused: topic ', bp.topic, ' paused by ', bp.paused_by)
        WHEN bu.kind IS NOT NULL THEN CONCAT(bu.kind, ': ', bu.reason)
        ELSE CONCAT('delayed: due at ', DATE_FORMAT(b.next_run_time, '%Y-%m-%d %H:%i:%s'), ' UTC')
      END, ')')
    ELSE CONCAT('due at ', DATE_FORMAT(x.next_run_time, '%Y-%m-%d %H:%i:%s'),
      ' UTC; later events of ', x.tenant_id, '/', x.data_id, ' wait for it')
  END AS detail,
  x.service, x.tenant_id, x.data_id, x.next_run_time,
  IF(x.comp_retrying OR tp.topic IS NOT NULL OR x.no_dispatcher OR u.kind IS NOT NULL, NULL, b.code) AS blocker_code
FROM (
  SELECT e.*,
    (e.phase = 'COMPENSATE' AND EXISTS (SELECT 1 FROM distribute_event_step s
       WHERE s.job_code = e.code AND s.status = 'COMPENSATING' AND s.compensation_retry_count > 0))
      AS comp_retrying,
    (LENGTH(CONCAT('dispatcher:', e.service)) <= 64 AND NOT EXISTS (
       SELECT 1 FROM distribute_lease_lock l WHERE l.lock_name = CONCAT('dispatcher:', e.service)
         AND l.expires_at >= UTC_TIMESTAMP(3) - INTERVAL 15 SECOND)) AS no_dispatcher,
    IF(EXISTS (SELECT 1 FROM distribute_unordered_topic o
               WHERE o.service_name = e.service AND o.topic = e.topic), NULL,
      LEAST(
        COALESCE((SELECT MIN(p.id) FROM distribute_event p
          WHERE p.tenant_id = e.tenant_id AND p.data_id = e.data_id AND p.status = 'PENDING'
            AND p.id < e.id AND p.service = e.service
            AND (p.next_run_time > UTC_TIMESTAMP(3) OR EXISTS (
              SELECT 1 FROM distribute_unroutable_topic pu WHERE pu.service_name = p.service
                AND pu.topic = p.topic AND pu.updated_time >= UTC_TIMESTAMP(3) - INTERVAL 60 SECOND)
              OR EXISTS (SELECT 1 FROM dsync_topic_pause pp WHERE pp.service = p.service
                AND pp.topic = p.topic))),
          9223372036854775807),
        COALESCE((SELECT MIN(p.id) FROM distribute_event p
          WHERE p.tenant_id = e.tenant_id AND p.data_id = e.data_id
            AND p.status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING')
            AND p.id < e.id AND p.service = e.service
            AND p.modifier_time < UTC_TIMESTAMP(3) - INTERVAL 5 MINUTE),
          9223372036854775807))) AS blocker_id,
    (e.next_run_time > UTC_TIMESTAMP(3) AND EXISTS (
       SELECT 1 FROM distribute_event q
       WHERE q.tenant_id = e.tenant_id AND q.data_id = e.data_id AND q.status = 'PENDING'
         AND q.id > e.id AND q.service = e.service
         AND NOT EXISTS (SELECT 1 FROM distribute_unordered_topic o
                         WHERE o.service_name = q.service AND o.topic = q.topic))) AS holds_later
  FROM distribute_event e
  WHERE e.status = 'PENDING'
) x
LEFT JOIN distribute_unroutable_topic u
  ON u.service_name = x.service AND u.topic = x.topic
 AND u.updated_time >= UTC_TIMESTAMP(3) - INTERVAL 60 SECOND
LEFT JOIN dsync_topic_pause tp ON tp.service = x.service AND tp.topic = x.topic
LEFT JOIN distribute_event b ON b.id = x.blocker_id
LEFT JOIN distribute_unroutable_topic bu
  ON bu.service_name = b.service AND bu.topic = b.topic
 AND bu.updated_time >= UTC_TIMESTAMP(3) - INTERVAL 60 SECOND
LEFT JOIN dsync_topic_pause bp ON bp.service = b.service AND bp.topic = b.topic
WHERE x.comp_retrying OR tp.topic IS NOT NULL OR x.no_dispatcher OR u.kind IS NOT NULL OR b.id IS NOT NULL
   OR x.holds_later
UNION ALL
SELECT NULL, CONCAT('capture:', c.name), 'dsync.capture', c.state, NULL, 'capture_failed',
  c.holder, NULL, NULL, c.updated_at, TIMESTAMPDIFF(SECOND, c.updated_at, UTC_TIMESTAMP(3)),
  c.last_error, NULL,
  CONCAT('capture ', c.name, ' failed; fix the cause, then: dsync capture resume ', c.name),
  c.service, 'dsync.capture', c.name, NULL, NULL
FROM dsync_capture c
WHERE c.state = 'FAILED'
UNION ALL
SELECT NULL, CONCAT('capture:', c.name, ':', p.tbl), 'dsync.capture', c.state, NULL, 'capture_table_paused',
  c.holder, NULL, NULL, c.updated_at, TIMESTAMPDIFF(SECOND, c.updated_at, UTC_TIMESTAMP(3)),
  c.last_error, NULL,
  CONCAT('table ', p.tbl, ' of capture ', c.name, ' paused: ',
    JSON_UNQUOTE(JSON_EXTRACT(c.paused_tables, CONCAT('$."', p.tbl, '"'))),
    '; align the target, then: dsync capture resume ', c.name),
  c.service, 'dsync.capture', c.name, NULL, NULL
FROM dsync_capture c
JOIN JSON_TABLE(JSON_KEYS(c.paused_tables), '$[*]' COLUMNS (tbl VARCHAR(64) PATH '$')) p
WHERE c.paused_tables IS NOT NULL
UNION ALL
SELECT NULL, CONCAT('capture:', c.name), 'dsync.capture', c.state, NULL, 'capture_lagging',
  c.holder, NULL, NULL, c.updated_at, TIMESTAMPDIFF(SECOND, c.updated_at, UTC_TIMESTAMP(3)),
  c.last_error, NULL,
  CONCAT('capture ', c.name, ' lags ', c.lag_s, ' s, above its bound of ', c.lag_bound_s,
    ' s (captures.', c.name, '.lag_bound_s)'),
  c.service, 'dsync.capture', c.name, NULL, NULL
FROM (
  SELECT k.*, GREATEST(
      COALESCE(TIMESTAMPDIFF(SECOND,
        (SELECT MIN(e.create_time) FROM distribute_event e
          WHERE e.topic = 'dsync.capture' AND e.status IN ('PENDING', 'ASSIGNED', 'RUNNING', 'COMPENSATING')
            AND e.service = k.service AND e.tenant_id = 'dsync.capture'
            AND SUBSTRING_INDEX(e.data_id, '#', 1) = k.name AND e.data_id NOT LIKE '%#copy#%'),
        UTC_TIMESTAMP(3)), 0),
      COALESCE(TIMESTAMPDIFF(SECOND, k.last_commit_at, k.updated_at), 0)) AS lag_s
  FROM dsync_capture k
  WHERE k.state = 'RUNNING'
) c
WHERE c.lag_s > c.lag_bound_s;
