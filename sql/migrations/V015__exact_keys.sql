-- dsync schema, version 15: keys compare byte for byte (docs/event-lifecycle.md "Codes").
--
-- Until now every key column used the table's collation, utf8mb4's default: case- and
-- accent-insensitive and PAD SPACE. Producing 'case-ABC' after 'CASE-abc' answered
-- "exists" with the other event, 'cafe ' collided with 'cafe', a batch holding
-- 'Bat-1', 'bat-1' and 'BAT-1 ' stored one row, and a batch row 'BX-1' counted the
-- events of 'bx-1'. Now these columns use a binary NO PAD collation, so two codes are
-- the same key only when their bytes are equal:
--   distribute_event(_archive): code, tenant_id, data_id, batch_code
--   distribute_event_step(_archive): code, job_code, tenant_id
--   distribute_batch: batch_code, tenant_id, completion_code
--   demo_ledger, demo_ledger_audit: idempotency_key, event_code
-- tenant_id and data_id are the ordering key ((tenant_id, data_id) events run in
-- creation order): 'Acme'/'42' and 'ACME'/'42' are different entities to a producer, so
-- they are different to dsync too. Columns that name configuration (topic, service,
-- node_address) keep their collation: the config and the registry decide those.
--
-- The collation: MariaDB's utf8mb4_nopad_bin (10.2+) or MySQL's utf8mb4_0900_bin
-- (8.0.17+), whichever the server has; both compare bytes and do not pad, so 'a' and
-- 'a ' differ. utf8mb4_bin is not enough: it is PAD SPACE on both servers, and
-- 'a ' = 'a' under it. A server with neither (MySQL 8.0.0-8.0.16) gets utf8mb4_bin:
-- there codes differing only in trailing spaces still collide (the API and CLI accept
-- such codes; a producer on such a server should not rely on trailing spaces).
-- Collation names cannot be bound, so each ALTER is built as text and prepared; the
-- name comes from information_schema, never from input.
--
-- The check first. The old collation may have joined rows whose keys differ in bytes:
-- steps whose job_code matches their event only ignoring case, accents or trailing
-- spaces, and open batches whose events carry such a variant of the batch code (only
-- rows written by hand can look like this: dsync writes codes as it read them). After
-- this migration they would no longer belong together, so it stops and names them
-- (a SELECT in a migration is a check: a non-NULL answer is the error, storage/migrator.h).
-- Fix them (make the codes equal byte for byte, or delete the strays) and run
-- `dsync migrate` again. Unique keys cannot hold such pairs (the old collation saw them
-- as duplicates), and a binary collation only tells more codes apart, so no unique key
-- below can fail.
SELECT CONCAT('steps whose job_code equals an event code only when case, accents or trailing spaces are ignored ',
  '(step code / job_code / event code): ',
  GROUP_CONCAT(CONCAT(QUOTE(x.step_code), ' / ', QUOTE(x.job_code), ' / ', QUOTE(x.event_code)) SEPARATOR ', '),
  '; make job_code equal to the event code byte for byte (or delete the steps), then run dsync migrate again')
FROM (SELECT s.code AS step_code, s.job_code, e.code AS event_code
      FROM distribute_event_step s JOIN distribute_event e ON e.code = s.job_code
      WHERE CAST(e.code AS BINARY) <> CAST(s.job_code AS BINARY) LIMIT 20) x;

SELECT CONCAT('open batches whose events carry the batch code only when case, accents or trailing spaces are ignored ',
  '(batch code / event code / its batch_code): ',
  GROUP_CONCAT(CONCAT(QUOTE(x.batch_code), ' / ', QUOTE(x.code), ' / ', QUOTE(x.event_batch)) SEPARATOR ', '),
  '; make the batch codes equal byte for byte, then run dsync migrate again')
FROM (SELECT b.batch_code, e.code, e.batch_code AS event_batch
      FROM distribute_batch b JOIN distribute_event e ON e.batch_code = b.batch_code
      WHERE b.status = 'OPEN' AND CAST(e.batch_code AS BINARY) <> CAST(b.batch_code AS BINARY) LIMIT 20) x;

SET @dsync_key_collation = IFNULL(
  (SELECT COLLATION_NAME FROM information_schema.COLLATIONS
   WHERE COLLATION_NAME IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin')
   ORDER BY COLLATION_NAME = 'utf8mb4_nopad_bin' DESC LIMIT 1),
  'utf8mb4_bin');

SET @dsync_key = CONCAT(' CHARACTER SET utf8mb4 COLLATE ', @dsync_key_collation);

-- One ALTER per table (one rebuild each); re-running one is harmless.
SET @dsync_sql = CONCAT('ALTER TABLE distribute_event',
  ' MODIFY COLUMN tenant_id VARCHAR(30)', @dsync_key, ' NOT NULL,',
  ' MODIFY COLUMN code VARCHAR(64)', @dsync_key, ' NOT NULL COMMENT ''unique event code: the idempotency key of producing (compared byte for byte)'',',
  ' MODIFY COLUMN data_id VARCHAR(64)', @dsync_key, ' NOT NULL COMMENT ''entity the event is about; (tenant_id, data_id) orders events'',',
  ' MODIFY COLUMN batch_code VARCHAR(64)', @dsync_key, ' NULL');

PREPARE dsync_stmt FROM @dsync_sql;

EXECUTE dsync_stmt;

DEALLOCATE PREPARE dsync_stmt;

SET @dsync_sql = REPLACE(@dsync_sql, 'ALTER TABLE distribute_event ', 'ALTER TABLE distribute_event_archive ');

PREPARE dsync_stmt FROM @dsync_sql;

EXECUTE dsync_stmt;

DEALLOCATE PREPARE dsync_stmt;

SET @dsync_sql = CONCAT('ALTER TABLE distribute_event_step',
  ' MODIFY COLUMN tenant_id VARCHAR(30)', @dsync_key, ' NOT NULL,',
  ' MODIFY COLUMN code VARCHAR(128)', @dsync_key, ' NOT NULL COMMENT ''deterministic: <event code>#<position>[.<child n>]; the idempotency key'',',
  ' MODIFY COLUMN job_code VARCHAR(64)', @dsync_key, ' NOT NULL COMMENT ''distribute_event.code''');

PREPARE dsync_stmt FROM @dsync_sql;

EXECUTE dsync_stmt;

DEALLOCATE PREPARE dsync_stmt;

SET @dsync_sql = REPLACE(@dsync_sql, 'ALTER TABLE distribute_event_step ', 'ALTER TABLE distribute_event_step_archive ');

PREPARE dsync_stmt FROM @dsync_sql;

EXECUTE dsync_stmt;

DEALLOCATE PREPARE dsync_stmt;

-- Batches are scoped by service (V014 gave them one): the key is (service, batch_code),
-- and the leader of a service reads its OPEN rows in batch_code order.
SET @dsync_sql = CONCAT('ALTER TABLE distribute_batch',
  ' MODIFY COLUMN batch_code VARCHAR(64)', @dsync_key, ' NOT NULL COMMENT ''distribute_event.batch_code of its events (of the same service)'',',
  ' MODIFY COLUMN tenant_id VARCHAR(30)', @dsync_key, ' NOT NULL DEFAULT ''0'' COMMENT ''tenant_id of the completion event'',',
  ' MODIFY COLUMN completion_code VARCHAR(64)', @dsync_key, ' NULL COMMENT ''code of the completion event produced (or found in its place: CONFLICT)'',',
  ' MODIFY COLUMN status VARCHAR(16) NOT NULL DEFAULT ''OPEN'' COMMENT ''OPEN, COMPLETED or CONFLICT (the completion code was taken)'',',
  ' DROP PRIMARY KEY, ADD PRIMARY KEY (service, batch_code),',
  ' DROP KEY idx_status, ADD KEY idx_status (status, service, batch_code)');

PREPARE dsync_stmt FROM @dsync_sql;

EXECUTE dsync_stmt;

DEALLOCATE PREPARE dsync_stmt;

-- status CONFLICT: the completion event's code was taken by an event this batch's
-- completer did not produce (a producer wrote it by hand); `conflict` says which, and
-- the batch is left for an operator (docs/event-lifecycle.md "Batches").
ALTER TABLE distribute_batch
  ADD COLUMN conflict VARCHAR(512) NULL COMMENT 'why the completion was not produced (status CONFLICT)';

SET @dsync_sql = CONCAT('ALTER TABLE demo_ledger',
  ' MODIFY COLUMN idempotency_key VARCHAR(128)', @dsync_key, ' NOT NULL COMMENT ''step code'',',
  ' MODIFY COLUMN event_code VARCHAR(64)', @dsync_key, ' NOT NULL');

PREPARE dsync_stmt FROM @dsync_sql;

EXECUTE dsync_stmt;

DEALLOCATE PREPARE dsync_stmt;

SET @dsync_sql = CONCAT('ALTER TABLE demo_ledger_audit',
  ' MODIFY COLUMN event_code VARCHAR(64)', @dsync_key, ' NOT NULL,',
  ' MODIFY COLUMN idempotency_key VARCHAR(128)', @dsync_key, ' NOT NULL COMMENT ''step code''');

PREPARE dsync_stmt FROM @dsync_sql;

EXECUTE dsync_stmt;

DEALLOCATE PREPARE dsync_stmt;
