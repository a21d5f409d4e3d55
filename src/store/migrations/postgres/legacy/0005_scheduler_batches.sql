-- Faster scheduler batches.
--
-- Due schedules are taken in (next_run_at, agent) order, so concurrent batches hold different
-- agents; the index gives that order without sorting every due row on each batch.
DROP INDEX schedules_due;
CREATE INDEX schedules_due ON schedules (next_run_at, agent) WHERE enabled = 1 AND next_run_at IS NOT NULL;

-- A new execution's event is appended once per statement rather than once per row: the
-- scheduler inserts hundreds of rows in one statement. Same columns as before; status updates
-- keep their row trigger (it counts seats at admission).
CREATE FUNCTION baton_execution_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt, seats_in_use, seat_cap)
  SELECT id, agent, NULL, status, changed_at, changed_by, change_reason, attempt, NULL, NULL FROM created;
  RETURN NULL;
END;
$$;
DROP TRIGGER executions_event_insert ON executions;
CREATE TRIGGER executions_event_insert AFTER INSERT ON executions
  REFERENCING NEW TABLE AS created
  FOR EACH STATEMENT EXECUTE FUNCTION baton_execution_created();

-- An event's execution always exists: the only writers of events are the triggers on executions,
-- in the statement that wrote the row, and executions are never deleted. The foreign key could
-- not fail, yet cost an index probe (through SPI) for every event — every status change.
ALTER TABLE execution_events DROP CONSTRAINT execution_events_execution_id_fkey;
