-- dsync schema, version 23: schedules (config `schedules`; docs/pause-and-schedules.md,
-- issue 37). One row per (service, schedule name), written only by the dispatcher
-- leader (control/scheduler.h), in the same transaction as the event a tick produces
-- and fenced by the lease, so a leader change or a clock step never fires a tick twice:
--   next_tick   the earliest tick not yet handled (UTC); a tick before it is never
--               produced again, whatever the clocks do;
--   last_tick   the tick of the last event produced, last_event_code its code
--               (sched:<service>:<name>:<tick epoch s>, unique like every code), and
--               last_run_at when it was produced (database clock);
--   skipped_ticks  ticks passed over by the missed-tick policy, in total;
--   cron        the expression next_tick was computed from: a changed expression
--               starts over from the next tick after now.
-- `dsync schedules` and GET /v1/schedules read it beside the config.
CREATE TABLE IF NOT EXISTS dsync_schedule (
  service          VARCHAR(128) NOT NULL,
  name             VARCHAR(50) NOT NULL,
  cron             VARCHAR(255) NOT NULL,
  topic            VARCHAR(50) NOT NULL,
  next_tick        DATETIME(3) NOT NULL COMMENT 'earliest tick not yet handled (UTC)',
  last_tick        DATETIME(3) NULL COMMENT 'tick of the last event produced (UTC)',
  last_event_code  VARCHAR(64) NULL,
  last_run_at      DATETIME(3) NULL COMMENT 'when the last event was produced (database clock, UTC)',
  skipped_ticks    BIGINT NOT NULL DEFAULT 0 COMMENT 'ticks passed over by the missed-tick policy',
  updated_time     DATETIME(3) NOT NULL,
  PRIMARY KEY (service, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
