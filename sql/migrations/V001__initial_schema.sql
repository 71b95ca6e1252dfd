-- dsync schema, version 1.
--
-- The three tables of the original design (seeds/004) keep their names, columns and
-- index names; columns were added (each with a default, so the seed's plain
-- INSERT (tenant_id, code, data_id, topic, payload) producer keeps working), widened
-- (node_address 50 -> 128) or given millisecond precision (DATETIME(3)), and two seed
-- indexes were extended with trailing columns (idx_node_address, idx_tenant_id): the
-- same name, a prefix that serves the same queries.
--
-- Every time is UTC on the database clock: dsync sessions run with time_zone '+00:00'
-- and all liveness and timeout decisions compare against NOW(3) in SQL.
--
-- Statements end with ";" at the end of a line. Every statement is idempotent (IF NOT EXISTS), so a migration interrupted midway
-- can simply run again.

CREATE TABLE IF NOT EXISTS distribute_node_registry (
  id                  BIGINT AUTO_INCREMENT PRIMARY KEY COMMENT 'surrogate key',
  service_name        VARCHAR(128) NOT NULL COMMENT 'service the node serves, e.g. kbs-sync',
  node_address        VARCHAR(128) NOT NULL COMMENT 'host:port the node is known by',
  status              TINYINT NOT NULL DEFAULT 1 COMMENT '0 offline, 1 online, 2 draining',
  last_heartbeat_time DATETIME(3) NOT NULL COMMENT 'database clock at the last heartbeat',
  create_time         DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  modifier_time       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  metadata            TEXT NULL COMMENT 'JSON: version, weight, capacity, processing_count, load, topics, host, pid, started_at',
  metadata_version    VARCHAR(20) NOT NULL DEFAULT '1' COMMENT 'format version of metadata',
  incarnation         VARCHAR(128) NOT NULL DEFAULT '' COMMENT 'host:pid:start of the process now heartbeating under this address',
  UNIQUE KEY uk_service_instance (service_name, node_address),
  KEY idx_service_status (service_name, status),
  KEY idx_heartbeat_time (last_heartbeat_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='consumer nodes, by heartbeat';

CREATE TABLE IF NOT EXISTS distribute_event (
  id              BIGINT AUTO_INCREMENT PRIMARY KEY,
  creator         VARCHAR(30) NOT NULL DEFAULT '0',
  create_time     DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  modifier        VARCHAR(30) NULL DEFAULT '0',
  modifier_time   DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)
                  COMMENT 'last activity; the consumer touches it while it works',
  sort            INT NOT NULL DEFAULT 0 COMMENT 'free for producers; dispatch orders by priority',
  tenant_id       VARCHAR(30) NOT NULL,
  code            VARCHAR(64) NOT NULL COMMENT 'unique event code: the idempotency key of producing',
  data_id         VARCHAR(64) NOT NULL COMMENT 'entity the event is about; (tenant_id, data_id) orders events',
  topic           VARCHAR(50) NOT NULL,
  status          VARCHAR(30) NOT NULL DEFAULT 'PENDING'
                  COMMENT 'PENDING, ASSIGNED, RUNNING, SUCCESS, FAILED, COMPENSATING, COMPENSATED',
  process_log     LONGTEXT NULL COMMENT 'JSON array of the last transitions',
  payload         LONGTEXT NULL,
  progress        INT NULL COMMENT 'percent of steps done',
  result          LONGTEXT NULL,
  retry_count     INT NOT NULL DEFAULT 0,
  max_retry       INT NOT NULL DEFAULT 3,
  node_address    VARCHAR(128) NULL COMMENT 'owning node while ASSIGNED/RUNNING/COMPENSATING',
  version         INT NOT NULL DEFAULT 1 COMMENT 'optimistic lock; every ownership change bumps it',
  priority        INT NOT NULL DEFAULT 0 COMMENT 'smaller runs first',
  next_run_time   DATETIME(3) NOT NULL DEFAULT '1970-01-01 00:00:00.000'
                  COMMENT 'not dispatched before this (UTC); the default means due at once, whatever the producer session time zone',
  attempt         INT NOT NULL DEFAULT 0 COMMENT 'claims so far; fences writes together with version',
  assigned_time   DATETIME(3) NULL,
  started_time    DATETIME(3) NULL,
  finished_time   DATETIME(3) NULL,
  batch_code      VARCHAR(64) NULL,
  trace_id        VARCHAR(64) NULL,
  last_error      TEXT NULL,
  UNIQUE KEY uk_code (code),
  KEY idx_topic_status (topic, status),
  KEY idx_node_address (node_address, status),
  KEY idx_status_modifier_time (status, modifier_time),
  KEY idx_tenant_id (tenant_id, data_id),
  KEY idx_create_time (create_time),
  KEY idx_dispatch (status, priority, id),
  KEY idx_batch_code (batch_code)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='durable sync events';

CREATE TABLE IF NOT EXISTS distribute_event_step (
  id                BIGINT AUTO_INCREMENT PRIMARY KEY,
  creator           VARCHAR(30) NOT NULL DEFAULT '0',
  create_time       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  modifier          VARCHAR(30) NULL DEFAULT '0',
  modifier_time     DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  sort              INT NOT NULL DEFAULT 0 COMMENT 'position in the plan',
  tenant_id         VARCHAR(30) NOT NULL,
  code              VARCHAR(64) NOT NULL COMMENT 'deterministic from event code and position: the idempotency key',
  job_code          VARCHAR(64) NOT NULL COMMENT 'distribute_event.code',
  parent_step_id    BIGINT NULL,
  step_type         VARCHAR(50) NOT NULL,
  step_name         VARCHAR(50) NOT NULL,
  status            VARCHAR(30) NOT NULL DEFAULT 'PENDING'
                    COMMENT 'PENDING, EXECUTING, SUCCESS, FAILED, COMPENSATING, COMPENSATED',
  payload           LONGTEXT NULL,
  payload_version   VARCHAR(20) NOT NULL DEFAULT '1',
  compensation_data LONGTEXT NULL COMMENT 'what compensation needs to undo the step',
  error_details     LONGTEXT NULL,
  retry_count       INT NOT NULL DEFAULT 0,
  max_retry         INT NOT NULL DEFAULT 3,
  executed_at       DATETIME(3) NULL,
  compensated_at    DATETIME(3) NULL,
  node_address      VARCHAR(128) NULL COMMENT 'node that last ran or compensated the step',
  attempt           INT NOT NULL DEFAULT 0 COMMENT 'event attempt that last touched the step',
  started_at        DATETIME(3) NULL,
  UNIQUE KEY uk_code (code),
  KEY idx_job_code (job_code),
  KEY idx_parent_step_id (parent_step_id),
  KEY idx_status (status),
  KEY idx_tenant_id (tenant_id),
  KEY idx_executed_at (executed_at),
  KEY idx_compensated_at (compensated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='saga steps of each event';

CREATE TABLE IF NOT EXISTS distribute_lease_lock (
  lock_name   VARCHAR(64) NOT NULL PRIMARY KEY,
  owner       VARCHAR(191) NULL COMMENT 'host:pid:random of the holder; NULL when free',
  token       BIGINT NOT NULL DEFAULT 0 COMMENT 'fencing token, bumped on every acquisition',
  expires_at  DATETIME(3) NOT NULL DEFAULT '1970-01-01 00:00:00.000' COMMENT 'database clock',
  acquired_at DATETIME(3) NULL,
  renewed_at  DATETIME(3) NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='leases (dispatcher leadership)';

CREATE TABLE IF NOT EXISTS demo_ledger (
  idempotency_key VARCHAR(128) NOT NULL PRIMARY KEY COMMENT 'step code',
  event_code      VARCHAR(64) NOT NULL,
  step_name       VARCHAR(50) NOT NULL,
  applications    INT NOT NULL DEFAULT 1 COMMENT 'bumped on every re-application; 1 when exactly once',
  created_at      DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at      DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  KEY idx_event_code (event_code)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='side effects of the built-in demo step';
