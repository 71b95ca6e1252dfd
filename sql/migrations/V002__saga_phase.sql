-- dsync schema, version 2: what the dispatcher, consumer and saga engine need beyond V1.
--
-- distribute_event.phase says what the next owner of an event does: FORWARD (run the
-- steps that are not SUCCESS yet) or COMPENSATE (undo the SUCCESS steps in reverse).
-- An event whose compensation must continue elsewhere (its node died, or a
-- compensation failed transiently and waits for its backoff) is PENDING with phase
-- COMPENSATE: unowned, dispatched like any other, claimed into COMPENSATING.
ALTER TABLE distribute_event
  ADD COLUMN phase VARCHAR(16) NOT NULL DEFAULT 'FORWARD' COMMENT 'FORWARD or COMPENSATE: what the next owner does';

-- Compensation retries of a step, separate from its forward retry_count.
ALTER TABLE distribute_event_step
  ADD COLUMN compensation_retry_count INT NOT NULL DEFAULT 0 COMMENT 'failed compensation attempts of this step';
