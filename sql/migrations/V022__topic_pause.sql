-- dsync schema, version 22: pausing a topic (docs/pause-and-schedules.md, issue 37).
--
-- dsync_topic_pause: one row per paused (service, topic), written by `dsync pause`,
-- POST /v1/topics/{topic}/pause and the console, deleted by resume. Every dispatcher
-- leader reads the service's rows once per dispatch cycle (control/topic_pause.h) and
-- keeps the paused topics' due events out of the page it assigns from, as it does for a
-- topic at its batch_limit: nothing of theirs is assigned while the row exists; events
-- already assigned or running finish. The row is the pause: it survives restarts and
-- is seen by every dispatcher, whichever leads.
CREATE TABLE IF NOT EXISTS dsync_topic_pause (
  service    VARCHAR(128) NOT NULL,
  topic      VARCHAR(50) NOT NULL,
  paused_by  VARCHAR(128) NOT NULL COMMENT 'who paused it (the CLI: --by or user@host; the API: its body''s "by")',
  paused_at  DATETIME(3) NOT NULL COMMENT 'database clock (UTC)',
  reason     VARCHAR(512) NOT NULL DEFAULT '',
  PRIMARY KEY (service, topic)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- v_events_needing_attention (V017) with one more reason, its columns unchanged (id,
-- code, topic, status, phase, reason, node_address, attempt, retry_count,
-- modifier_time, idle_s, last_error, result, detail, service, tenant_id, data_id,
-- next_run_time, blocker_code):
--   paused   a PENDING event of a paused topic (dsync_topic_pause): nothing of the
--            topic is assigned until it is resumed; detail names who paused it, when and
--            why. It comes right after compensation_retrying: an operator's pause
--            explains the wait before any finding of the leader does.
-- and a PENDING event of a paused topic holds the later events of its (tenant_id,
-- data_id) like an unroutable one (held_behind, the blocker's detail 'paused: ...').
-- Every other rule is V017's.
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
   OR x.holds_later;
