-- One checksum per (table, space) of the database it runs in (env_a or env_b):
--   table <TAB> space_id <TAB> rows <TAB> SHA-256 over the rows in key order
-- Each row is hashed over every synced column, QUOTE()d so that NULL, '' and 'NULL'
-- differ and DATETIME(3) milliseconds count; the row hashes are concatenated in
-- primary-key order and hashed again. Equal lines in env_a and env_b mean equal rows.
SET SESSION group_concat_max_len = 16777216;

SELECT 'kb_space', id, COUNT(*),
       SHA2(GROUP_CONCAT(SHA2(CONCAT_WS('|', QUOTE(id), QUOTE(tenant_id), QUOTE(space_key), QUOTE(name),
                                        QUOTE(description), QUOTE(owner), QUOTE(visibility),
                                        QUOTE(created_at), QUOTE(updated_at), QUOTE(archived_at)), 256)
                         ORDER BY id SEPARATOR ''), 256)
FROM kb_space GROUP BY id
UNION ALL
SELECT 'kb_doc', space_id, COUNT(*),
       SHA2(GROUP_CONCAT(SHA2(CONCAT_WS('|', QUOTE(id), QUOTE(space_id), QUOTE(parent_id), QUOTE(title),
                                        QUOTE(slug), QUOTE(body), QUOTE(format), QUOTE(version),
                                        QUOTE(author), QUOTE(created_at), QUOTE(updated_at),
                                        QUOTE(published_at)), 256)
                         ORDER BY id SEPARATOR ''), 256)
FROM kb_doc GROUP BY space_id
UNION ALL
SELECT 'kb_tag', space_id, COUNT(*),
       SHA2(GROUP_CONCAT(SHA2(CONCAT_WS('|', QUOTE(doc_id), QUOTE(name), QUOTE(space_id), QUOTE(color),
                                        QUOTE(created_at)), 256)
                         ORDER BY doc_id, name SEPARATOR ''), 256)
FROM kb_tag GROUP BY space_id
UNION ALL
SELECT 'kb_permission', space_id, COUNT(*),
       SHA2(GROUP_CONCAT(SHA2(CONCAT_WS('|', QUOTE(id), QUOTE(space_id), QUOTE(principal_type),
                                        QUOTE(principal), QUOTE(role), QUOTE(granted_by),
                                        QUOTE(granted_at), QUOTE(expires_at)), 256)
                         ORDER BY id SEPARATOR ''), 256)
FROM kb_permission GROUP BY space_id;
