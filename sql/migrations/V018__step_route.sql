-- dsync schema, version 18: per-step routing (docs/event-lifecycle.md, "Hand-on").
--
-- A saga's steps may run on different nodes: when no live node reaches every
-- datasource of a topic's plan, the dispatcher gives an event to a node that reaches
-- what its next step needs, and a node that reaches the event's next step no more
-- hands it on (PENDING, node NULL, version + 1) with `route` set to what that step
-- needs. route: the datasources the event's next piece of work needs, sorted and
-- comma-separated (e.g. 'env_b'); NULL for a fresh event (its first forward step's
-- datasources apply). The column has a default, so a plain-SQL producer's INSERT that
-- names none still works (CONTRACT "producing with plain SQL"). Plain ADD COLUMN: the
-- same on MariaDB and MySQL 8.0.
ALTER TABLE distribute_event
  ADD COLUMN route VARCHAR(255) NULL DEFAULT NULL
  COMMENT 'datasources the next step needs (sorted, comma-separated), set by a hand-on; NULL: the first step''s';

ALTER TABLE distribute_event_archive
  ADD COLUMN route VARCHAR(255) NULL DEFAULT NULL
  COMMENT 'datasources the next step needed when archived';
