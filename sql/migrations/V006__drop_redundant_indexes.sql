-- dsync schema, version 6: drops two secondary indexes of distribute_event that are
-- left prefixes of later ones and so serve no query the longer index does not.
--
-- Every status change of an event (assign, claim, step progress, finish: several per
-- event) maintains every secondary index of the table; an index that buys nothing
-- costs a B-tree write per change.
--   idx_dispatch (status, priority, id): a prefix of idx_due (status, priority, id,
--     next_run_time), V003, which the dispatcher forces.
--   idx_tenant_id (tenant_id, data_id): a prefix of idx_entity_status (tenant_id,
--     data_id, status, id), V003, which the ordering probes use. (The seed named it;
--     the seed's columns stay, its index names are not a contract.)
-- distribute_event_step's own idx_tenant_id stays.
--
-- One DROP per statement: a rerun after an interruption between them gets "can't drop,
-- check that it exists" (1091) for the first, which the migrator counts as done, and
-- still drops the second. MySQL 8 has no DROP INDEX IF EXISTS.
ALTER TABLE distribute_event DROP KEY idx_dispatch;

ALTER TABLE distribute_event DROP KEY idx_tenant_id;
