-- Run once by the mariadb image on an empty data directory (docker-entrypoint-initdb.d),
-- after it created the `dsync` database and user from MARIADB_DATABASE / MARIADB_USER.
-- The two environments the example topics sync, and a user for the steps with no more
-- rights than they need: read env_a; read and write env_b, and create its
-- dsync_step_undo table (table_sync keeps before-images there).
CREATE DATABASE IF NOT EXISTS env_a CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS env_b CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS 'kb_sync'@'%' IDENTIFIED BY 'change-me';
GRANT SELECT ON env_a.* TO 'kb_sync'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON env_b.* TO 'kb_sync'@'%';
