-- dsync schema, version 5: an append-only audit of the built-in demo step's effects,
-- for the chaos suite (tests/chaos/) and anyone who wants to see fencing at work.
--
-- Only a demo step whose event payload asks for it ({"demo": {"audit": true}})
-- writes here, so demos and benchmarks pay nothing. Each row is written by the
-- step's own statement, inside the step's fenced transaction, and records both who
-- wrote it (the claim attempt the writer believes it holds, its process id) and who
-- owned the event at that instant according to the database (the event row's
-- attempt, status and node_address, read in the same statement while the fence holds
-- the row lock). With working fencing the two always agree; a write by a node that
-- lost the event (a frozen node that woke up, a reset it did not see) would commit a
-- row where they differ. The auto-increment id orders the rows of one event in the
-- order their transactions held its row lock.
CREATE TABLE IF NOT EXISTS demo_ledger_audit (
  id              BIGINT AUTO_INCREMENT PRIMARY KEY,
  event_code      VARCHAR(64) NOT NULL,
  step_name       VARCHAR(50) NOT NULL,
  idempotency_key VARCHAR(128) NOT NULL COMMENT 'step code',
  op              VARCHAR(16) NOT NULL COMMENT 'apply (execute) or undo (compensate)',
  writer_attempt  INT NOT NULL COMMENT 'the claim attempt the writing run holds',
  writer_pid      INT NOT NULL COMMENT 'process id of the writing node',
  owner_attempt   INT NULL COMMENT 'distribute_event.attempt when the row was written',
  owner_status    VARCHAR(30) NULL COMMENT 'distribute_event.status when the row was written',
  owner_node      VARCHAR(128) NULL COMMENT 'distribute_event.node_address when the row was written',
  written_at      DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY idx_event_code (event_code, id),
  KEY idx_idempotency_key (idempotency_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='who applied and undid each demo effect (opt-in)';
