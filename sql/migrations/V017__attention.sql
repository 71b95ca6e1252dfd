-- dsync schema, version 17: no silent waits (docs/event-lifecycle.md, "Ordering",
-- "Needing attention").
--
-- distribute_unroutable_topic is keyed by (service_name, topic): two services may
-- define the same topic, and the leader of one must not overwrite the other's row.
-- Its new column `kind` tells the leader's two findings apart:
--   unroutable     a configured topic no live node can run (V009);
--   unknown_topic  PENDING events of a topic that neither the leader's config defines
--                  nor any live node serves (inserted by plain SQL, or a topic removed
--                  from the config): no node will ever be given them.
ALTER TABLE distribute_unroutable_topic
  ADD COLUMN kind VARCHAR(32) NOT NULL DEFAULT 'unroutable'
  COMMENT 'unroutable: configured, no live node can run it; unknown_topic: no config defines it';

ALTER TABLE distribute_unroutable_topic DROP PRIMARY KEY, ADD PRIMARY KEY (service_name, topic);

-- distribute_unordered_topic: the topics the leader's config marks `ordered: false`, one
-- row per (service, topic), rewritten by the leader when it starts leading and when the
-- set differs. The ordering rule does not hold their events back, so the view must not
-- call them held.
CREATE TABLE IF NOT EXISTS distribute_unordered_topic (
  service_name VARCHAR(128) NOT NULL,
  topic        VARCHAR(50) NOT NULL,
  updated_time DATETIME(3) NOT NULL COMMENT 'written by the leader (UTC)',
  PRIMARY KEY (service_name, topic)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- v_events_needing_attention: the columns of V009 (id, code, topic, status, phase,
-- reason, node_address, attempt, retry_count, modifier_time, idle_s, last_error, result,
-- detail), then service, tenant_id, data_id, next_run_time and blocker_code. One row per
-- event, the first reason that applies:
--   failed                 FAILED;
--   stuck                  ASSIGNED/RUNNING/COMPENSATING with no activity for 5 minutes;
--   compensation_retrying  a compensation failed and is being retried;
-- and for PENDING events:
--   unknown_topic          no config defines the topic and no live node serves it;
--   unroutable             the topic is configured but no live node can run it;
--                          (both found by the leader: rows of distribute_unroutable_topic)
--   no_dispatcher_for_service  no dispatcher of the event's service holds (or held in
--                          the last 15 s) the lease row 'dispatcher:<service>'; services
--                          whose lock name exceeds 64 bytes (hashed) are not judged;
--   held_behind            the ordering rule holds it behind an earlier unfinished event of
--                          its (tenant_id, data_id) that cannot run: the earliest earlier
--                          PENDING one that is unroutable, of an unknown topic or delayed,
--                          or the earliest earlier stuck one. blocker_code names it; detail
--                          gives the blocker's reason;
--   delayed                due later (next_run_time in the future) while later events of
--                          its (tenant_id, data_id) wait for it; detail gives the due time.
-- Rows of distribute_unroutable_topic count while refreshed in the last 60 s.
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
    WHEN u.kind IS NOT NULL THEN u.reason
    WHEN x.no_dispatcher THEN CONCAT('no live dispatcher of service ', x.service,
      ' holds its lease (dispatcher:', x.service, ')')
    WHEN b.id IS NOT NULL THEN CONCAT('held behind ', b.code, ' (',
      CASE
        WHEN b.status <> 'PENDING' THEN CONCAT('stuck: ', b.status, ' on ', IFNULL(b.node_address, '-'),
          ', no activity since ', DATE_FORMAT(b.modifier_time, '%Y-%m-%d %H:%i:%s'))
        WHEN bu.kind IS NOT NULL THEN CONCAT(bu.kind, ': ', bu.reason)
        ELSE CONCAT('delayed: due at ', DATE_FORMAT(b.next_run_time, '%Y-%m-%d %H:%i:%s'), ' UTC')
      END, ')')
    ELSE CONCAT('due at ', DATE_FORMAT(x.next_run_time, '%Y-%m-%d %H:%i:%s'),
      ' UTC; later events of ', x.tenant_id, '/', x.data_id, ' wait for it')
  END AS detail,
  x.service, x.tenant_id, x.data_id, x.next_run_time,
  IF(x.comp_retrying OR x.no_dispatcher OR u.kind IS NOT NULL, NULL, b.code) AS blocker_code
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
                AND pu.topic = p.topic AND pu.updated_time >= UTC_TIMESTAMP(3) - INTERVAL 60 SECOND))),
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
LEFT JOIN distribute_event b ON b.id = x.blocker_id
LEFT JOIN distribute_unroutable_topic bu
  ON bu.service_name = b.service AND bu.topic = b.topic
 AND bu.updated_time >= UTC_TIMESTAMP(3) - INTERVAL 60 SECOND
WHERE x.comp_retrying OR x.no_dispatcher OR u.kind IS NOT NULL OR b.id IS NOT NULL OR x.holds_later;
