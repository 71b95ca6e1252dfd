-- dsync schema, version 21: fair dispatch across tenants (issue 37,
-- docs/fairness-and-limits.md).
--
-- idx_fair serves the dispatcher's two fair reads (events/assign.h):
--   - the (priority, tenant_id) pairs with PENDING events of a service: GROUP BY its
--     first two columns with status and service equal to constants, a loose index scan
--     ("Using index for group-by") that reads one entry per pair the table holds,
--     whatever the number of events;
--   - each pair's window of due events: a ref on (priority, tenant_id, status, service)
--     and a range on id, in id order, next_run_time checked in the index.
-- Neither reads another tenant's events, so one tenant's backlog of 100,000 events
-- costs another tenant's read nothing. Plain ADD KEY: the same on MariaDB and MySQL 8.0.
ALTER TABLE distribute_event
  ADD KEY idx_fair (priority, tenant_id, status, service, id, next_run_time);
