-- Sample knowledge-base data for env_a, generated in SQL from MariaDB's sequence
-- engine (seq_1_to_N) in well under a second. Run in env_a after kb_schema.sql with
--   SET @spaces = 240, @poisoned = 13;
-- Space s gets 3..18 documents (ids s*1000+n), 0..2 tags per document, 3..10
-- permissions (ids s*100+p); titles and tags in several scripts, bodies of 1-5 KB,
-- DATETIME(3) values with milliseconds, NULLs in the nullable columns.
-- Space @poisoned also grants a group whose principal is a 74-character LDAP DN: it
-- fits kb_permission.principal (VARCHAR(191)) but not env_b's CHECK constraint of
-- at most 64 characters (see env_b_setup.sql), so syncing that space fails at its last step.

INSERT INTO kb_space (id, tenant_id, space_key, name, description, owner, visibility,
                      created_at, updated_at, archived_at)
SELECT s.seq,
       ELT(1 + s.seq % 3, 'acme', 'globex', 'initech'),
       CONCAT('KB', LPAD(s.seq, 4, '0')),
       CONCAT(ELT(1 + s.seq % 8, 'Engineering runbooks', 'Équipe produit', 'Überblick & Planung',
                  '設計ドキュメント', '数据平台', 'Служба поддержки', 'Diseño de API', '🚀 Releases'),
              ' ', s.seq),
       IF(s.seq % 5 = 0, NULL,
          CONCAT('Space ', s.seq, ' — décisions, how-tos and post-mortems of team ',
                 ELT(1 + s.seq % 4, 'Nordlicht', 'Sakura', 'Colibrí', 'Berlin-Süd'))),
       CONCAT(ELT(1 + s.seq % 6, 'alice', 'bruno', 'chloé', 'dmitri', 'eun-ji', 'fatima'), '@example.com'),
       ELT(1 + s.seq % 3, 'public', 'internal', 'private'),
       TIMESTAMP'2023-03-01 08:00:00' + INTERVAL s.seq DAY + INTERVAL (s.seq * 7919) % 1000 * 1000 MICROSECOND,
       TIMESTAMP'2024-06-01 08:00:00' + INTERVAL s.seq HOUR + INTERVAL (s.seq * 104729) % 1000 * 1000 MICROSECOND,
       IF(s.seq % 11 = 0, TIMESTAMP'2024-09-30 17:45:12.250', NULL)
FROM seq_1_to_1000 s
WHERE s.seq <= @spaces;

INSERT INTO kb_doc (id, space_id, parent_id, title, slug, body, format, version, author,
                    created_at, updated_at, published_at)
SELECT d.id, d.space_id,
       IF(d.n <= 3, NULL, d.space_id * 1000 + 1 + d.n % 3),
       d.title,
       CONCAT('doc-', d.id),
       CONCAT('# ', d.title, '\n\n',
              REPEAT(CONCAT('Étape ', d.id % 97, ' : vérifier la réplication — checksum ', MD5(d.id),
                            '. Die Synchronisation läuft über dsync; 同步完成后核对校验和。\n\n'),
                     8 + d.id % 25)),
       IF(d.id % 7 = 0, 'html', 'markdown'),
       1 + d.id % 9,
       CONCAT(ELT(1 + d.id % 6, 'alice', 'bruno', 'chloé', 'dmitri', 'eun-ji', 'fatima'), '@example.com'),
       TIMESTAMP'2024-01-01 00:00:00' + INTERVAL d.id MINUTE + INTERVAL (d.id * 7919) % 1000 * 1000 MICROSECOND,
       TIMESTAMP'2024-01-01 00:00:00' + INTERVAL d.id MINUTE + INTERVAL d.id % 90 DAY
         + INTERVAL (d.id * 104729) % 1000 * 1000 MICROSECOND,
       IF(d.id % 4 = 0, NULL, TIMESTAMP'2024-01-01 00:00:00' + INTERVAL d.id MINUTE + INTERVAL d.id % 90 DAY
                              + INTERVAL 1 HOUR)
FROM (SELECT s.seq AS space_id, n.seq AS n, s.seq * 1000 + n.seq AS id,
             CONCAT(ELT(1 + (s.seq * 1000 + n.seq) * 7 % 12,
                        'Onboarding guide', 'Guide de déploiement', 'Überblick: Datenfluss',
                        'Incident post-mortem', '障害対応手順', '数据同步设计', 'Руководство по API',
                        'Guía de migración', 'Release checklist 🚀', 'Ποιότητα δεδομένων',
                        'Sicherheitsrichtlinie', 'FAQ — häufige Fragen'),
                    ' #', n.seq) AS title
      FROM seq_1_to_1000 s JOIN seq_1_to_18 n ON n.seq <= 3 + (s.seq * 17) % 16
      WHERE s.seq <= @spaces) d;

INSERT INTO kb_tag (doc_id, name, space_id, color, created_at)
SELECT d.id,
       ELT(1 + (d.id + t.seq) % 10, 'how-to', 'runbook', 'post-mortem', 'api', 'onboarding',
           'sécurité', 'データ', '架构', 'faq', 'brouillon'),
       d.space_id,
       IF((d.id + t.seq) % 3 = 0, NULL, CONCAT('#', LEFT(MD5(d.id + t.seq), 6))),
       d.created_at + INTERVAL t.seq SECOND
FROM kb_doc d JOIN seq_1_to_2 t ON t.seq <= d.id % 3;

INSERT INTO kb_permission (id, space_id, principal_type, principal, role, granted_by,
                           granted_at, expires_at)
SELECT s.seq * 100 + p.seq, s.seq,
       ELT(1 + p.seq % 3, 'user', 'group', 'app'),
       CASE p.seq % 3
         WHEN 0 THEN CONCAT('user:', ELT(1 + (s.seq + p.seq) % 6, 'alice', 'bruno', 'chloé', 'dmitri',
                                          'eun-ji', 'fatima'), '@example.com')
         WHEN 1 THEN CONCAT('group:kb-', ELT(1 + p.seq % 4, 'editors', 'readers', 'sre', 'legal'), '-', s.seq)
         ELSE ELT(1 + p.seq % 2, 'app:search-indexer', 'app:backup')
       END,
       ELT(1 + (s.seq + p.seq) % 3, 'viewer', 'editor', 'admin'),
       IF(p.seq = 1, NULL, 'admin@example.com'),
       TIMESTAMP'2024-02-01 12:00:00' + INTERVAL s.seq * 10 + p.seq HOUR
         + INTERVAL (s.seq * 31 + p.seq) % 1000 * 1000 MICROSECOND,
       IF(p.seq % 4 = 0, TIMESTAMP'2025-12-31 23:59:59.999', NULL)
FROM seq_1_to_1000 s JOIN seq_1_to_10 p ON p.seq <= 3 + s.seq % 8
WHERE s.seq <= @spaces;

INSERT INTO kb_permission (id, space_id, principal_type, principal, role, granted_by,
                           granted_at, expires_at)
VALUES (@poisoned * 100 + 99, @poisoned, 'group',
        'group:cn=Knowledge Base Editors (EMEA),ou=Groups,ou=Corp,dc=example,dc=com',
        'editor', 'admin@example.com', TIMESTAMP'2024-11-18 09:30:00.125', NULL);
