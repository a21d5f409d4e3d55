-- An admission's event carries its task's concurrency key, so the canary replays seats per key
-- from the event log alone (src/canary/invariants/flow.ts).
-- Never edit a shipped migration: add a new numbered file.
ALTER TABLE execution_events ADD COLUMN flow_key text;

CREATE OR REPLACE FUNCTION baton_execution_event()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  seats INTEGER;
  cap INTEGER;
BEGIN
  IF NEW.status = 'running' AND OLD.status <> 'running' THEN
    UPDATE agents SET running_count = running_count + 1, queued_out = queued_out + (OLD.status = 'queued')::int
    WHERE name = NEW.agent RETURNING running_count, max_parallel INTO seats, cap;
  ELSIF OLD.status = 'running' AND NEW.status <> 'running' THEN
    UPDATE agents SET running_count = running_count - 1, queued_out = queued_out - (NEW.status = 'queued')::int
    WHERE name = NEW.agent;
  ELSIF (OLD.status = 'queued') <> (NEW.status = 'queued') THEN
    UPDATE agents SET queued_out = queued_out + CASE WHEN OLD.status = 'queued' THEN 1 ELSE -1 END WHERE name = NEW.agent;
  END IF;
  INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt, seats_in_use, seat_cap, flow_key)
  VALUES (NEW.id, NEW.agent, OLD.status, NEW.status, NEW.changed_at, NEW.changed_by, NEW.change_reason, NEW.attempt, seats, cap, NEW.flow_key);
  RETURN NULL;
END;
$function$;
