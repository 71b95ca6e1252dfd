-- dsync schema, version 16: resets are counted apart from retries
-- (docs/event-lifecycle.md, "Retry arithmetic").
--
-- retry_count counts the forward retries a step's own failures used (max_retry: N
-- retries after the first attempt). A reset that is not a step's fault (its node died
-- or was frozen, the database connection was lost, a run was abandoned) no longer adds
-- to it; it adds to reset_count instead, which the topic's max_resets bounds: the claim
-- that finds an event reset more than max_resets times ends it FAILED ("reset N times
-- (node crashes, lost connections) ..."), so a poison event that kills its node every
-- time still ends. An operator's retry clears both.
ALTER TABLE distribute_event
  ADD COLUMN reset_count INT NOT NULL DEFAULT 0
  COMMENT 'resets of a claimed run that were not a step failure (node died, connection lost); bounded by max_resets';

ALTER TABLE distribute_event_archive
  ADD COLUMN reset_count INT NOT NULL DEFAULT 0
  COMMENT 'resets of a claimed run that were not a step failure';
