-- Seats in use per agent, kept in the agent row (issue #12): admission reads the count from the
-- row instead of counting running executions. The event trigger keeps it: every change into or
-- out of `running` adds or takes one in the same statement, so no writer can forget it; the
-- admission event's seats_in_use is the count after this admission. The canary checks the
-- counter against the rows (S-04). Never edit a shipped migration: add a new numbered file.

ALTER TABLE agents ADD COLUMN running_count INTEGER NOT NULL DEFAULT 0;
UPDATE agents SET running_count = (SELECT count(*) FROM executions e WHERE e.agent = agents.name AND e.status = 'running');

DROP TRIGGER executions_event_update;
CREATE TRIGGER executions_event_update AFTER UPDATE ON executions
  WHEN OLD.status IS NOT NEW.status OR OLD.cancel_requested_at IS NOT NEW.cancel_requested_at
BEGIN
  UPDATE agents SET running_count = running_count + (CASE WHEN NEW.status = 'running' THEN 1 ELSE -1 END)
  WHERE name = NEW.agent AND (NEW.status = 'running') <> (OLD.status = 'running');
  INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt, seats_in_use, seat_cap)
  SELECT NEW.id, NEW.agent, OLD.status, NEW.status, NEW.changed_at, NEW.changed_by, NEW.change_reason, NEW.attempt,
    CASE WHEN admitted THEN (SELECT running_count FROM agents WHERE name = NEW.agent) END,
    CASE WHEN admitted THEN (SELECT max_parallel FROM agents WHERE name = NEW.agent) END
  FROM (SELECT NEW.status = 'running' AND OLD.status <> 'running' AS admitted);
END;

-- Rows that arrive or leave as running (no transition does; a restore or a hand-written row might)
-- keep the counter too.
CREATE TRIGGER executions_seat_insert AFTER INSERT ON executions WHEN NEW.status = 'running'
BEGIN
  UPDATE agents SET running_count = running_count + 1 WHERE name = NEW.agent;
END;
CREATE TRIGGER executions_seat_delete AFTER DELETE ON executions WHEN OLD.status = 'running'
BEGIN
  UPDATE agents SET running_count = running_count - 1 WHERE name = OLD.agent;
END;
