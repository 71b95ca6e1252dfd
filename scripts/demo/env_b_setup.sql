-- env_b before the sync: the same tables, one more CHECK constraint, and stale copies of
-- two spaces. Run in env_b after kb_schema.sql, with env_a_seed on the same server
-- holding env_a's rows of those two spaces (the demo copies them over: env_b's server
-- does not reach env_a), and
--   SET @poisoned = 13, @stale = 7;
--
-- A policy only env_b enforces: principals of at most 64 characters (env_b's
-- directory cannot hold longer names). The column types are the same on both sides, so
-- table_sync's schema preflight passes (a narrower column would fail every space
-- before its first write, naming the column); a principal longer than 64 characters
-- cannot be written to env_b (CHECK constraint, error 4025, which table_sync classifies
-- as permanent).
ALTER TABLE kb_permission ADD CONSTRAINT principal_at_most_64 CHECK (CHAR_LENGTH(principal) <= 64);

-- Stale copies of spaces @stale and @poisoned, as an earlier sync left them: the space
-- under its old name, its first six documents as short drafts, their tags, and two
-- permissions with an older role. The sync of @stale must overwrite them; the failed
-- sync of @poisoned must leave them exactly as they are (compensation restores the
-- before-image of every step that had already run).
INSERT INTO kb_space
SELECT id, tenant_id, space_key, CONCAT(name, ' (old)'), NULL, owner, visibility,
       created_at, created_at, NULL
FROM env_a_seed.kb_space WHERE id IN (@stale, @poisoned);

INSERT INTO kb_doc
SELECT id, space_id, parent_id, CONCAT(title, ' (draft)'), slug, LEFT(body, 300), format, 1,
       author, created_at, created_at, NULL
FROM env_a_seed.kb_doc WHERE space_id IN (@stale, @poisoned) AND id % 1000 <= 6;

INSERT INTO kb_tag
SELECT doc_id, name, space_id, NULL, created_at
FROM env_a_seed.kb_tag WHERE space_id IN (@stale, @poisoned) AND doc_id % 1000 <= 6;

INSERT INTO kb_permission
SELECT id, space_id, principal_type, principal, 'viewer', granted_by, granted_at, NULL
FROM env_a_seed.kb_permission WHERE space_id IN (@stale, @poisoned) AND id % 100 <= 2;
