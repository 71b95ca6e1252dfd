-- dsync schema, version 3: indexes for the dispatcher's reads (dispatcher/), so that
-- none of them visits terminal events, however many the table keeps.
--
-- A plain ADD KEY: MySQL 8 has no ADD INDEX IF NOT EXISTS, and a rerun after an
-- interruption gets "duplicate key name" (1061), which the migrator counts as done.

-- Due events: status = 'PENDING' in (priority, id) order from a keyset cursor, the
-- scan stopping at LIMIT; next_run_time <= NOW(3) is checked inside the index, so
-- events waiting for a backoff cost no row lookups. (idx_dispatch lacks next_run_time.)
ALTER TABLE distribute_event
  ADD KEY idx_due (status, priority, id, next_run_time);

-- Ordered topics: "is there an earlier non-terminal event of this (tenant_id,
-- data_id)?" probes only the PENDING/ASSIGNED/RUNNING/COMPENSATING entries of the
-- entity, never its terminal history. (idx_tenant_id stops at data_id.)
ALTER TABLE distribute_event
  ADD KEY idx_entity_status (tenant_id, data_id, status, id);

-- The sweeper's liveness probe by node_address (uk_service_instance leads with
-- service_name).
ALTER TABLE distribute_node_registry
  ADD KEY idx_node_liveness (node_address, status, last_heartbeat_time);
