-- Seats in use per agent, kept in the agent row (issue #12): admission reads the count from the
-- row it locks instead of counting running executions, so a claim can decide in one statement
-- (transitions/admit.ts, admitInOneStatement). The event trigger keeps it: every change into or
-- out of `running` adds or takes one in the same statement, under the agent row's lock, so no
-- writer can forget it; the admission event's seats_in_use is the count after this admission.
-- The canary checks the counter against the rows (S-04). Never edit a shipped migration: add a
-- new numbered file.

-- No status may change between the count below and the new trigger taking over.
LOCK TABLE executions IN SHARE MODE;

ALTER TABLE agents ADD COLUMN running_count INTEGER NOT NULL DEFAULT 0;
UPDATE agents a SET running_count = (SELECT count(*) FROM executions e WHERE e.agent = a.name AND e.status = 'running');

CREATE OR REPLACE FUNCTION baton_execution_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  seats INTEGER;
  cap INTEGER;
BEGIN
  IF NEW.status = 'running' AND OLD.status <> 'running' THEN
    UPDATE agents SET running_count = running_count + 1 WHERE name = NEW.agent RETURNING running_count, max_parallel INTO seats, cap;
  ELSIF OLD.status = 'running' AND NEW.status <> 'running' THEN
    UPDATE agents SET running_count = running_count - 1 WHERE name = NEW.agent;
  END IF;
  INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt, seats_in_use, seat_cap)
  VALUES (NEW.id, NEW.agent, OLD.status, NEW.status, NEW.changed_at, NEW.changed_by, NEW.change_reason, NEW.attempt, seats, cap);
  RETURN NULL;
END;
$$;

-- Rows that arrive or leave as running (no transition does; a restore or a hand-written row might)
-- keep the counter too. The WHEN is evaluated without calling the function: other inserts and
-- the pruner's deletes (terminal rows only) pay nothing.
CREATE FUNCTION baton_seat_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE agents SET running_count = running_count + 1 WHERE name = NEW.agent;
  ELSE
    UPDATE agents SET running_count = running_count - 1 WHERE name = OLD.agent;
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER executions_seat_insert AFTER INSERT ON executions
  FOR EACH ROW WHEN (NEW.status = 'running') EXECUTE FUNCTION baton_seat_row();
CREATE TRIGGER executions_seat_delete AFTER DELETE ON executions
  FOR EACH ROW WHEN (OLD.status = 'running') EXECUTE FUNCTION baton_seat_row();
