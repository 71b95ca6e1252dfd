-- dsync schema, version 7: fewer secondary indexes on the rows every event rewrites.
--
-- A status change of an event (assign, claim, finish: three for a 1-step event) or of a
-- step (EXECUTING -> SUCCESS) rewrites the entry of every secondary index that holds a
-- changed column; an insert writes one entry in each. Measured with `dsync_load_bench
-- ceiling` (the engine's exact row writes, no dsync code; bench/RESULTS.md): the indexes
-- dropped here cost ~35% of MariaDB's CPU per 1-step event. None serves a query of dsync's
-- that another index does not:
--   distribute_event
--     idx_topic_status (topic, status): /metrics' count by topic and status now reads
--       idx_due, which gains `topic` as its last column (covering; idx_due is rewritten
--       on every status change anyway, so topic costs nothing extra there).
--     idx_status_modifier_time (status, modifier_time): the sweeper reads the in-flight
--       range of idx_due instead (bounded by the nodes' capacity + prefetch); this one
--       was rewritten on every write of the row, touches included (modifier_time).
--   distribute_event_step: dsync reads steps by code (uk_code) and by event (idx_job_code)
--     only; idx_status, idx_executed_at, idx_compensated_at, idx_parent_step_id and
--     idx_tenant_id served ad-hoc queries and cost five index writes per step row plus
--     two rewrites at each status change. Add your own for a query you run often.
--
-- Each statement is atomic. A rerun after an interruption gets "can't drop, check that
-- it exists" (1091) for a DROP already done, which the migrator counts as done; the
-- idx_due rebuild is one ALTER (drop + add), harmless to repeat.
ALTER TABLE distribute_event DROP KEY idx_topic_status;

ALTER TABLE distribute_event DROP KEY idx_status_modifier_time;

ALTER TABLE distribute_event DROP KEY idx_due, ADD KEY idx_due (status, priority, id, next_run_time, topic);

ALTER TABLE distribute_event_step DROP KEY idx_status;

ALTER TABLE distribute_event_step DROP KEY idx_executed_at;

ALTER TABLE distribute_event_step DROP KEY idx_compensated_at;

ALTER TABLE distribute_event_step DROP KEY idx_parent_step_id;

ALTER TABLE distribute_event_step DROP KEY idx_tenant_id;
