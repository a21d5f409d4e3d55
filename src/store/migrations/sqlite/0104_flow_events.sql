-- An admission's event carries its task's concurrency key, so the canary replays seats per key
-- from the event log alone (src/canary/invariants/flow.ts).
-- Never edit a shipped migration: add a new numbered file.
ALTER TABLE execution_events ADD COLUMN flow_key TEXT;

DROP TRIGGER executions_event_update;
CREATE TRIGGER executions_event_update AFTER UPDATE ON executions
  WHEN OLD.status IS NOT NEW.status OR OLD.cancel_requested_at IS NOT NEW.cancel_requested_at
BEGIN
  UPDATE agents SET
    running_count = running_count + (NEW.status = 'running') - (OLD.status = 'running'),
    queued_out = queued_out + (OLD.status = 'queued') - (NEW.status = 'queued')
  WHERE name = NEW.agent
    AND ((NEW.status = 'running') <> (OLD.status = 'running') OR (NEW.status = 'queued') <> (OLD.status = 'queued'));
  INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt, seats_in_use, seat_cap, flow_key)
  SELECT NEW.id, NEW.agent, OLD.status, NEW.status, NEW.changed_at, NEW.changed_by, NEW.change_reason, NEW.attempt,
    CASE WHEN admitted THEN (SELECT running_count FROM agents WHERE name = NEW.agent) END,
    CASE WHEN admitted THEN (SELECT max_parallel FROM agents WHERE name = NEW.agent) END,
    NEW.flow_key
  FROM (SELECT NEW.status = 'running' AND OLD.status <> 'running' AS admitted);
END;
