-- dsync schema, version 10: nodes that do not claim what they are given.
--
-- The leader's sweeper hands back an event that stayed ASSIGNED to a live node longer
-- than its topic's claim_timeout_ms (dispatcher/event_sweeper.h, "not claimed"); each
-- such hand-back is counted on the node's registry row, so `dsync nodes` and
-- GET /v1/nodes can name a node that keeps doing so. The heartbeat upsert never writes
-- these columns: the count survives restarts under the same address.
ALTER TABLE distribute_node_registry
  ADD COLUMN not_claimed_count BIGINT NOT NULL DEFAULT 0
    COMMENT 'events the sweeper handed back because this node did not claim them',
  ADD COLUMN last_not_claimed_time DATETIME(3) NULL
    COMMENT 'database clock at the last such hand-back';
