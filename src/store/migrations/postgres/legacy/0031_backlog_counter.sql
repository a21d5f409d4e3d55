-- Queued executions per agent, kept by counters instead of counted (issues #10 and #12). Every
-- creation counted the agent's queued rows to enforce max_backlog (baton_submit_many, the
-- transaction path), and the agents list, /metrics and the scheduler counted them per agent: each
-- cost grew with the backlog (a submit to an agent with 300,000 queued took 64 ms; max_backlog
-- allows 1,000,000).
--
-- An agent's backlog is queued_in - queued_out. queued_in (agent_backlog) counts rows created
-- queued; only creators write it, under their new-work turn, so a submit still never waits for a
-- claim (one counter in the agent row would have made every submit wait for the agent's claims,
-- and they for it). queued_out (the agent row, beside running_count) counts rows that left
-- `queued` less rows that came back to it (a lapse, a release); the event trigger keeps it in the
-- same UPDATE of the agent row as the seats. Rows created in one statement (a scheduler batch)
-- add to queued_in once per agent, in the statement-level trigger that writes their events: one
-- row updated many times in a transaction costs PostgreSQL more each time. The canary checks both
-- counters against the rows (S-04). Never edit a shipped migration: add a new numbered file.

-- No status may change between the counts below and the new triggers taking over.
LOCK TABLE executions IN SHARE MODE;

CREATE TABLE agent_backlog (
  agent     TEXT PRIMARY KEY REFERENCES agents (name) ON DELETE CASCADE,
  queued_in BIGINT NOT NULL DEFAULT 0
);
ALTER TABLE agents ADD COLUMN queued_out BIGINT NOT NULL DEFAULT 0;
INSERT INTO agent_backlog (agent, queued_in)
  SELECT a.name, (SELECT count(*) FROM executions e WHERE e.agent = a.name AND e.status = 'queued') FROM agents a;

CREATE FUNCTION baton_agent_backlog_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO agent_backlog (agent, queued_in) VALUES (NEW.name, 0);
  RETURN NULL;
END;
$$;
CREATE TRIGGER agents_backlog_row AFTER INSERT ON agents FOR EACH ROW EXECUTE FUNCTION baton_agent_backlog_row();

-- As migration 0005's, plus the new rows' share of queued_in.
CREATE OR REPLACE FUNCTION baton_execution_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt, seats_in_use, seat_cap)
  SELECT id, agent, NULL, status, changed_at, changed_by, change_reason, attempt, NULL, NULL FROM created;
  UPDATE agent_backlog b SET queued_in = b.queued_in + c.n
  FROM (SELECT agent, count(*) AS n FROM created WHERE status = 'queued' GROUP BY agent) c
  WHERE b.agent = c.agent;
  RETURN NULL;
END;
$$;

-- As migration 0019's, with queued_out kept in the same UPDATE of the agent row as the seats.
CREATE OR REPLACE FUNCTION baton_execution_event() RETURNS trigger LANGUAGE plpgsql AS $$
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
  INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt, seats_in_use, seat_cap)
  VALUES (NEW.id, NEW.agent, OLD.status, NEW.status, NEW.changed_at, NEW.changed_by, NEW.change_reason, NEW.attempt, seats, cap);
  RETURN NULL;
END;
$$;

-- A queued row deleted (no transition does: deleting an agent cancels its queue first) leaves the backlog.
CREATE FUNCTION baton_backlog_row_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE agents SET queued_out = queued_out + 1 WHERE name = OLD.agent;
  RETURN NULL;
END;
$$;
CREATE TRIGGER executions_backlog_delete AFTER DELETE ON executions
  FOR EACH ROW WHEN (OLD.status = 'queued') EXECUTE FUNCTION baton_backlog_row_deleted();

-- As migration 0024's, with the backlog read from the counters instead of counted. Read after the
-- turn, queued_in has every earlier creator's rows (and this call's own); a claim that commits
-- after the agent row was read only makes the backlog smaller than the one judged.
CREATE OR REPLACE FUNCTION baton_submit_many(
  p_id TEXT[],
  p_agent TEXT[],
  p_trigger_kind TEXT[],
  p_origin TEXT[],
  p_message TEXT[],
  p_payload TEXT[],
  p_priority INTEGER[],
  p_run_after BIGINT[],
  p_idempotency_key TEXT[],
  p_retry_policy TEXT[],
  p_at BIGINT[],
  p_actor TEXT[],
  p_audit_detail TEXT[]
) RETURNS SETOF executions LANGUAGE plpgsql AS $$
DECLARE
  turn TEXT;
  a agents;
  queued BIGINT;
BEGIN
  FOR turn IN SELECT DISTINCT u.agent FROM unnest(p_agent) AS u(agent) ORDER BY u.agent LOOP
    PERFORM 1 FROM agents WHERE name = turn FOR KEY SHARE;
    IF FOUND THEN
      PERFORM pg_advisory_xact_lock(hashtext('new-work:' || turn));
    END IF;
  END LOOP;
  FOR i IN 1 .. coalesce(array_length(p_id, 1), 0) LOOP
    SELECT * INTO a FROM agents WHERE name = p_agent[i];
    CONTINUE WHEN NOT FOUND;
    SELECT b.queued_in - a.queued_out INTO queued FROM agent_backlog b WHERE b.agent = p_agent[i];
    CONTINUE WHEN queued >= a.max_backlog;
    RETURN QUERY
      WITH created AS (
        INSERT INTO executions (id, agent, trigger_kind, origin, message, payload, priority, run_after, max_redeliveries,
          timeout_seconds, lease_ttl_seconds, idempotency_key, retry_policy, status, attempt, created_at, queued_at,
          changed_at, changed_by, change_reason)
        VALUES (p_id[i], p_agent[i], p_trigger_kind[i], p_origin[i], p_message[i], p_payload[i], p_priority[i], p_run_after[i],
          a.max_redeliveries, a.timeout_seconds, a.lease_ttl_seconds, p_idempotency_key[i], coalesce(p_retry_policy[i], a.retry_policy),
          'queued', 0, p_at[i], p_at[i], p_at[i], p_actor[i], 'created')
        RETURNING *
      ), audited AS (
        INSERT INTO audit_log (at, actor, action, subject, execution_id, detail)
        SELECT p_at[i], p_actor[i], 'execution.create', p_agent[i], created.id, p_audit_detail[i] FROM created
      )
      SELECT * FROM created;
  END LOOP;
END;
$$;
