-- Queued executions per agent, kept by counters instead of counted (issues #10 and #12). Every
-- creation counted the agent's queued rows to enforce max_backlog, and the agents list, /metrics
-- and the scheduler counted them per agent: each cost grew with the backlog (a submit to an agent
-- with 300,000 queued took 27 ms on SQLite, all of it holding the event loop; max_backlog allows
-- 1,000,000).
--
-- An agent's backlog is queued_in - queued_out. queued_in (agent_backlog) counts rows created
-- queued; only creators write it, and they already take turns per agent (the new-work turn), so
-- on PostgreSQL a submit still never waits for a claim. queued_out (the agent row, beside
-- running_count) counts rows that left `queued` less rows that came back to it (a lapse, a
-- release); the event trigger keeps it in the statement that changes the status, as it keeps the
-- seats. The canary checks both against the rows (S-04). Never edit a shipped migration: add a new
-- numbered file.

CREATE TABLE agent_backlog (
  agent     TEXT PRIMARY KEY REFERENCES agents (name) ON DELETE CASCADE,
  queued_in INTEGER NOT NULL DEFAULT 0
);
ALTER TABLE agents ADD COLUMN queued_out INTEGER NOT NULL DEFAULT 0;
INSERT INTO agent_backlog (agent, queued_in)
  SELECT a.name, (SELECT count(*) FROM executions e WHERE e.agent = a.name AND e.status = 'queued') FROM agents a;

CREATE TRIGGER agents_backlog_row AFTER INSERT ON agents
BEGIN
  INSERT INTO agent_backlog (agent, queued_in) VALUES (NEW.name, 0);
END;

CREATE TRIGGER executions_backlog_insert AFTER INSERT ON executions WHEN NEW.status = 'queued'
BEGIN
  UPDATE agent_backlog SET queued_in = queued_in + 1 WHERE agent = NEW.agent;
END;
CREATE TRIGGER executions_backlog_delete AFTER DELETE ON executions WHEN OLD.status = 'queued'
BEGIN
  UPDATE agents SET queued_out = queued_out + 1 WHERE name = OLD.agent;
END;

-- As migration 0019's, with queued_out kept in the same UPDATE of the agent row as the seats.
DROP TRIGGER executions_event_update;
CREATE TRIGGER executions_event_update AFTER UPDATE ON executions
  WHEN OLD.status IS NOT NEW.status OR OLD.cancel_requested_at IS NOT NEW.cancel_requested_at
BEGIN
  UPDATE agents SET
    running_count = running_count + (NEW.status = 'running') - (OLD.status = 'running'),
    queued_out = queued_out + (OLD.status = 'queued') - (NEW.status = 'queued')
  WHERE name = NEW.agent
    AND ((NEW.status = 'running') <> (OLD.status = 'running') OR (NEW.status = 'queued') <> (OLD.status = 'queued'));
  INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt, seats_in_use, seat_cap)
  SELECT NEW.id, NEW.agent, OLD.status, NEW.status, NEW.changed_at, NEW.changed_by, NEW.change_reason, NEW.attempt,
    CASE WHEN admitted THEN (SELECT running_count FROM agents WHERE name = NEW.agent) END,
    CASE WHEN admitted THEN (SELECT max_parallel FROM agents WHERE name = NEW.agent) END
  FROM (SELECT NEW.status = 'running' AND OLD.status <> 'running' AS admitted);
END;
