-- dsync schema, version 28: idx_fair rewritten only when an event enters or leaves
-- PENDING (issue 37 item 6, docs/fairness-and-limits.md).
--
-- V021's idx_fair (priority, tenant_id, status, service, id, next_run_time) held
-- `status`, so every transition of every event rewrote its entry (PENDING -> ASSIGNED ->
-- RUNNING -> SUCCESS: three entry moves besides the insert); an event life simulated on
-- 20,000 rows made 41-42 buffer-pool page writes per event with it, 34-37 without.
-- fair_pending is 1 while the event is PENDING, else 0 (a virtual column: no storage, no
-- table rebuild); InnoDB leaves an index entry alone when none of its columns changes,
-- so the new idx_fair moves once per event (PENDING -> ASSIGNED) and again only when an
-- event returns to PENDING (retry, reset, hand-on).
--
-- The two fair reads (events/assign.h) keep their shape:
--   - the (priority, tenant_id) pairs with PENDING events of a service: a range over
--     the PENDING entries (fair_pending = 1), already in (priority, tenant_id) order (no
--     temporary table, no sort); it reads the PENDING events, not the finished ones
--     (MariaDB 10.11 plans no loose index scan over a generated column, so it is no
--     longer one dive per pair), and the dispatcher reads it at most every 2 s;
--   - each pair's window of due events: a ref on (fair_pending, priority, tenant_id,
--     service) and a range on id, in id order, next_run_time checked in the index.
-- The archive (V011) gets the same column (its tables keep the live ones' columns), no
-- index; the purge copies no generated column (events/purge.cc). One change per
-- statement (a rerun counts 1060 / 1091 / 1061 as done).
-- Between the DROP and the ADD a fair read has no idx_fair (its FORCE INDEX fails and
-- the cycle is retried); run `dsync migrate` before the new dispatchers start.
ALTER TABLE distribute_event
  ADD COLUMN fair_pending TINYINT AS (status = 'PENDING') VIRTUAL;

ALTER TABLE distribute_event DROP KEY idx_fair;

ALTER TABLE distribute_event ADD KEY idx_fair (fair_pending, priority, tenant_id, service, id, next_run_time);

ALTER TABLE distribute_event_archive
  ADD COLUMN fair_pending TINYINT AS (status = 'PENDING') VIRTUAL;
