-- dsync schema, version 29: fair dispatch's index stops moving with every status change
-- (issue 37 item 6, docs/fairness-and-limits.md).
--
-- V021's idx_fair (priority, tenant_id, status, service, id, next_run_time) held
-- `status`, so each of an event's transitions (PENDING -> ASSIGNED -> RUNNING -> SUCCESS)
-- moved its entry: 13.3-14.6 page writes per row for the two node-side UPDATEs against
-- 10.3-11.4 without the index (bench/RESULTS.md section 11). The fair reads only ask
-- "PENDING or not", so the index now leads with a plain column that says exactly that:
--
--   fair_pending = 1 while the event is PENDING, 0 otherwise,
--
-- written by every statement that moves an event to or from PENDING (the assignment,
-- a retry's backoff, a hand-on, a sweeper's reset, an operator's retry, a cancel, a
-- recorded finished event: events/*.cc), so the entry moves at those transitions only,
-- never at claim or completion. Not a generated column: MariaDB 10.11 plans no loose
-- index scan over one (V028, tried and reverted), and the pairs' read needs it.
-- A plain INSERT names neither column: status defaults to PENDING, fair_pending to 1
-- (CONTRACT "producing with plain SQL"). A status changed by hand without the column is
-- repaired by the dispatcher leader within kFairRepairInterval (events::RepairFairPending).
--
-- The column is added with default 0 and the PENDING rows (a range of idx_due) set to 1
-- before the default becomes 1, so an existing table's finished rows are not rewritten.
-- Plain ADD COLUMN / ALTER COLUMN / ADD KEY: the same on MariaDB >= 10.6 and MySQL 8.0.
-- Harmless to repeat (the migrator counts an existing column as done; the index is
-- dropped and re-added in one ALTER).
ALTER TABLE distribute_event
  ADD COLUMN fair_pending TINYINT NOT NULL DEFAULT 0
  COMMENT '1 while status is PENDING, else 0 (issue 37: leads idx_fair; written with every change to or from PENDING)';

UPDATE distribute_event FORCE INDEX (idx_due) SET fair_pending = 1 WHERE status = 'PENDING';

ALTER TABLE distribute_event ALTER COLUMN fair_pending SET DEFAULT 1;

ALTER TABLE distribute_event
  DROP KEY idx_fair,
  ADD KEY idx_fair (fair_pending, priority, tenant_id, service, id, next_run_time);

-- The archive keeps the live table's columns in order (V011); its rows are finished.
ALTER TABLE distribute_event_archive
  ADD COLUMN fair_pending TINYINT NOT NULL DEFAULT 0
  COMMENT 'as distribute_event.fair_pending: 0 for every finished event';
