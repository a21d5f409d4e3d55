-- The hot tables' value checks move from table CHECK constraints to domains (issue #12).
--
-- PostgreSQL reads a table's CHECK constraints from their stored text again at the start of every
-- INSERT or UPDATE statement on it, whichever columns the statement sets: the seat counter's
-- UPDATE of `agents` (two per task, in the event trigger) re-read seven checks on config columns
-- it never sets, and each status change of `executions` three. Perf on PostgreSQL during W1 put
-- a tenth of its CPU samples there. A domain's check is read once per session and is evaluated
-- only where a statement gives the column a value: the same rules bind every row, at a fraction
-- of the cost.
-- `running_has_lease` spans several columns and stays a table check. SQLite compiles checks into
-- each prepared statement once and keeps its table checks.
--
-- Upgrading: the domains start empty, so changing a column's type rewrites no table; PostgreSQL
-- rebuilds the partial indexes whose predicate names `status` (most hold live rows only; the
-- two over finished rows read the whole table), and each check added to a domain reads the
-- column once. Never edit a shipped migration: add a new numbered file.

-- Triggers whose WHEN names `status` block the type change; they come back unchanged below.
DROP TRIGGER executions_event_update ON executions;
DROP TRIGGER executions_seat_insert ON executions;
DROP TRIGGER executions_seat_delete ON executions;

ALTER TABLE agents
  DROP CONSTRAINT agents_max_parallel_check,
  DROP CONSTRAINT agents_max_backlog_check,
  DROP CONSTRAINT agents_timeout_seconds_check,
  DROP CONSTRAINT agents_lease_ttl_seconds_check,
  DROP CONSTRAINT agents_max_redeliveries_check,
  DROP CONSTRAINT agents_delivery_check,
  DROP CONSTRAINT agents_breaker_state_check;
ALTER TABLE executions
  DROP CONSTRAINT executions_status_check,
  DROP CONSTRAINT executions_trigger_kind_check;

CREATE DOMAIN agents_max_parallel AS INTEGER;
CREATE DOMAIN agents_max_backlog AS INTEGER;
CREATE DOMAIN agents_timeout_seconds AS INTEGER;
CREATE DOMAIN agents_lease_ttl_seconds AS INTEGER;
CREATE DOMAIN agents_max_redeliveries AS INTEGER;
CREATE DOMAIN agents_delivery AS TEXT;
CREATE DOMAIN agents_breaker_state AS TEXT;
CREATE DOMAIN executions_status AS TEXT;
CREATE DOMAIN executions_trigger_kind AS TEXT;

ALTER TABLE agents
  ALTER COLUMN max_parallel TYPE agents_max_parallel,
  ALTER COLUMN max_backlog TYPE agents_max_backlog,
  ALTER COLUMN timeout_seconds TYPE agents_timeout_seconds,
  ALTER COLUMN lease_ttl_seconds TYPE agents_lease_ttl_seconds,
  ALTER COLUMN max_redeliveries TYPE agents_max_redeliveries,
  ALTER COLUMN delivery TYPE agents_delivery,
  ALTER COLUMN breaker_state TYPE agents_breaker_state;
ALTER TABLE executions
  ALTER COLUMN status TYPE executions_status,
  ALTER COLUMN trigger_kind TYPE executions_trigger_kind;

ALTER DOMAIN agents_max_parallel ADD CONSTRAINT agents_max_parallel_check CHECK (VALUE >= 0);
ALTER DOMAIN agents_max_backlog ADD CONSTRAINT agents_max_backlog_check CHECK (VALUE >= 0);
ALTER DOMAIN agents_timeout_seconds ADD CONSTRAINT agents_timeout_seconds_check CHECK (VALUE > 0);
ALTER DOMAIN agents_lease_ttl_seconds ADD CONSTRAINT agents_lease_ttl_seconds_check CHECK (VALUE > 0);
ALTER DOMAIN agents_max_redeliveries ADD CONSTRAINT agents_max_redeliveries_check CHECK (VALUE >= 0);
ALTER DOMAIN agents_delivery ADD CONSTRAINT agents_delivery_check CHECK (VALUE IN ('pull', 'push'));
ALTER DOMAIN agents_breaker_state ADD CONSTRAINT agents_breaker_state_check
  CHECK (VALUE IN ('closed', 'open', 'half_open'));
ALTER DOMAIN executions_status ADD CONSTRAINT executions_status_check
  CHECK (VALUE IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'skipped'));
ALTER DOMAIN executions_trigger_kind ADD CONSTRAINT executions_trigger_kind_check
  CHECK (VALUE IN ('schedule', 'manual', 'webhook', 'api', 'mcp', 'cli', 'retry', 'chain', 'group'));

CREATE TRIGGER executions_event_update AFTER UPDATE ON executions
  FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.cancel_requested_at IS DISTINCT FROM NEW.cancel_requested_at)
  EXECUTE FUNCTION baton_execution_event();
CREATE TRIGGER executions_seat_insert AFTER INSERT ON executions
  FOR EACH ROW WHEN (NEW.status = 'running') EXECUTE FUNCTION baton_seat_row();
CREATE TRIGGER executions_seat_delete AFTER DELETE ON executions
  FOR EACH ROW WHEN (OLD.status = 'running') EXECUTE FUNCTION baton_seat_row();
