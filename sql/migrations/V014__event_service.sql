-- dsync schema, version 14: events carry their service (docs/event-lifecycle.md,
-- "Services").
--
-- Several services (config `service`, `--service`) may share one framework database.
-- The registry always kept nodes apart by service_name; now every event names the
-- service it belongs to, and the dispatcher, sweeper, retention and batch completer of
-- a service, and its nodes, read and write only that service's events, and judge only
-- that service's nodes. The column has a default, so the plain-SQL producer contract
-- holds: `INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)`
-- enqueues for the default service. A producer for another service names it:
--   INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, service)
--   VALUES ('t1', 'order-42', '42', 'ORDER_SYNC', '{"id": 42}', 'billing-sync');
--
-- The column default (the service of events inserted without one) is the service of
-- the `dsync migrate` that created the column (its config `service` or --service, which
-- the migrator passes as @dsync_service), except on an upgraded database whose registry
-- holds exactly one service: there the existing events and batches are that service's,
-- and so are the rows its producers keep inserting without naming one. So a database
-- serving one service, whatever its name, keeps the plain INSERT of the seed. Change it
-- later with
--   ALTER TABLE distribute_event ALTER COLUMN service SET DEFAULT 'name';
--   ALTER TABLE distribute_batch ALTER COLUMN service SET DEFAULT 'name';
ALTER TABLE distribute_event
  ADD COLUMN service VARCHAR(128) NOT NULL DEFAULT 'kbs-sync'
  COMMENT 'service whose dispatchers and nodes handle the event (config service)';

ALTER TABLE distribute_event_archive
  ADD COLUMN service VARCHAR(128) NOT NULL DEFAULT 'kbs-sync'
  COMMENT 'service whose dispatchers and nodes handled the event';

ALTER TABLE distribute_batch
  ADD COLUMN service VARCHAR(128) NOT NULL DEFAULT 'kbs-sync'
  COMMENT 'service whose leader completes the batch (and of its completion event)';

-- The sole registered service of an upgraded database, else the migrating config's.
SET @dsync_sole_service = COALESCE(
  (SELECT IF(COUNT(DISTINCT service_name) = 1, MIN(service_name), NULL) FROM distribute_node_registry),
  NULLIF(@dsync_service, ''), 'kbs-sync');

SET @dsync_sql = IF(@dsync_sole_service = 'kbs-sync', 'DO 0',
  CONCAT('ALTER TABLE distribute_event ALTER COLUMN service SET DEFAULT ', QUOTE(@dsync_sole_service)));

PREPARE dsync_stmt FROM @dsync_sql;

EXECUTE dsync_stmt;

DEALLOCATE PREPARE dsync_stmt;

SET @dsync_sql = IF(@dsync_sole_service = 'kbs-sync', 'DO 0',
  CONCAT('ALTER TABLE distribute_batch ALTER COLUMN service SET DEFAULT ', QUOTE(@dsync_sole_service)));

PREPARE dsync_stmt FROM @dsync_sql;

EXECUTE dsync_stmt;

DEALLOCATE PREPARE dsync_stmt;

UPDATE distribute_event SET service = @dsync_sole_service
WHERE service <> @dsync_sole_service;

UPDATE distribute_batch SET service = @dsync_sole_service
WHERE service <> @dsync_sole_service;

-- The dispatch indexes end with the service: every query of the dispatcher, sweeper
-- and nodes checks it inside the index it already reads (no row lookups), the order
-- they give is unchanged, and the reads by status or tenant that do not name a service
-- (API, console, metrics) use them as before. One change per statement (a rerun after
-- an interruption gets 1091 / 1061 for what is done).
ALTER TABLE distribute_event DROP KEY idx_due;

ALTER TABLE distribute_event ADD KEY idx_due (status, priority, id, next_run_time, topic, service);

ALTER TABLE distribute_event DROP KEY idx_node_address;

ALTER TABLE distribute_event ADD KEY idx_node_address (node_address, status, service);

ALTER TABLE distribute_event DROP KEY idx_entity_status;

ALTER TABLE distribute_event ADD KEY idx_entity_status (tenant_id, data_id, status, id, service);

-- v_node_load counts a node's events of its own service only (two services may run a
-- node at the same address).
CREATE OR REPLACE VIEW v_node_load AS
SELECT r.service_name, r.node_address, r.status, r.last_heartbeat_time,
  TIMESTAMPDIFF(SECOND, r.last_heartbeat_time, UTC_TIMESTAMP(3)) AS heartbeat_age_s,
  IF(JSON_VALID(r.metadata), JSON_UNQUOTE(JSON_EXTRACT(r.metadata, '$.capacity')), NULL) AS capacity,
  IF(JSON_VALID(r.metadata), JSON_UNQUOTE(JSON_EXTRACT(r.metadata, '$.processing_count')), NULL)
    AS reported_processing,
  (SELECT COUNT(*) FROM distribute_event e WHERE e.node_address = r.node_address
    AND e.service = r.service_name AND e.status = 'ASSIGNED') AS assigned,
  (SELECT COUNT(*) FROM distribute_event e WHERE e.node_address = r.node_address
    AND e.service = r.service_name AND e.status IN ('RUNNING', 'COMPENSATING')) AS running,
  (SELECT COUNT(*) FROM distribute_event e WHERE e.node_address = r.node_address
    AND e.service = r.service_name AND e.status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING'))
    AS in_flight
FROM distribute_node_registry r
WHERE r.status IN (1, 2) AND r.last_heartbeat_time >= UTC_TIMESTAMP(3) - INTERVAL 30 SECOND;

-- v_events_all: as in V011, with the service.
CREATE OR REPLACE VIEW v_events_all AS
SELECT 'live' AS stored, e.id, e.code, e.topic, e.tenant_id, e.data_id, e.status, e.phase,
  e.node_address, e.attempt, e.retry_count, e.max_retry, e.version, e.priority, e.batch_code,
  e.trace_id, e.payload, e.result, e.last_error, e.process_log, e.progress,
  e.create_time, e.next_run_time, e.assigned_time, e.started_time, e.finished_time, e.modifier_time,
  e.service
FROM distribute_event e
UNION ALL
SELECT 'archive' AS stored, a.id, a.code, a.topic, a.tenant_id, a.data_id, a.status, a.phase,
  a.node_address, a.attempt, a.retry_count, a.max_retry, a.version, a.priority, a.batch_code,
  a.trace_id, a.payload, a.result, a.last_error, a.process_log, a.progress,
  a.create_time, a.next_run_time, a.assigned_time, a.started_time, a.finished_time, a.modifier_time,
  a.service
FROM distribute_event_archive a;
