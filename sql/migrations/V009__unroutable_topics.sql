-- dsync schema, version 9: topics no live node can run, and their events in the
-- inspection view.
--
-- distribute_unroutable_topic: written by the dispatcher leader only (dispatch_cycle.h),
-- one row per topic that no live non-draining node can run: none serves it, none
-- serving it reaches every datasource its plan names, or its plan failed to build on
-- every node serving it. The leader knows this from the nodes' heartbeat metadata at
-- each cycle; it rewrites the rows when the set or a reason changes and refreshes
-- updated_time (and pending_events) every 5 s while any row exists, so a row not
-- refreshed for a minute (no dispatcher running) is stale and ignored by the view.
CREATE TABLE IF NOT EXISTS distribute_unroutable_topic (
  topic          VARCHAR(50) NOT NULL PRIMARY KEY,
  service_name   VARCHAR(128) NOT NULL COMMENT 'service of the dispatcher that wrote the row',
  reason         VARCHAR(1024) NOT NULL COMMENT 'why no live node can run it, naming nodes and datasources',
  pending_events BIGINT NOT NULL DEFAULT 0 COMMENT 'PENDING events of the topic at the last refresh',
  since_time     DATETIME(3) NOT NULL COMMENT 'unroutable since (UTC)',
  updated_time   DATETIME(3) NOT NULL COMMENT 'last refresh by the leader (UTC)'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- v_events_needing_attention, as in V004 plus PENDING events of an unroutable topic
-- (reason 'unroutable'), and a last column `detail`: for those, why no node can run
-- them (NULL for the other reasons).
CREATE OR REPLACE VIEW v_events_needing_attention AS
SELECT e.id, e.code, e.topic, e.status, e.phase,
  CASE
    WHEN e.status = 'FAILED' THEN 'failed'
    WHEN e.status IN ('RUNNING', 'COMPENSATING', 'ASSIGNED')
         AND e.modifier_time < UTC_TIMESTAMP(3) - INTERVAL 5 MINUTE THEN 'stuck'
    WHEN e.status = 'PENDING' AND u.topic IS NOT NULL THEN 'unroutable'
    ELSE 'compensation_retrying'
  END AS reason,
  e.node_address, e.attempt, e.retry_count, e.modifier_time,
  TIMESTAMPDIFF(SECOND, e.modifier_time, UTC_TIMESTAMP(3)) AS idle_s,
  e.last_error, e.result,
  IF(e.status = 'PENDING', u.reason, NULL) AS detail
FROM distribute_event e
LEFT JOIN distribute_unroutable_topic u
  ON u.topic = e.topic AND u.updated_time >= UTC_TIMESTAMP(3) - INTERVAL 60 SECOND
WHERE e.status = 'FAILED'
   OR (e.status IN ('RUNNING', 'COMPENSATING', 'ASSIGNED')
       AND e.modifier_time < UTC_TIMESTAMP(3) - INTERVAL 5 MINUTE)
   OR (e.status = 'PENDING' AND u.topic IS NOT NULL)
   OR (e.phase = 'COMPENSATE' AND e.status IN ('PENDING', 'ASSIGNED', 'COMPENSATING')
       AND EXISTS (SELECT 1 FROM distribute_event_step s
                   WHERE s.job_code = e.code AND s.status = 'COMPENSATING'
                     AND s.compensation_retry_count > 0));
