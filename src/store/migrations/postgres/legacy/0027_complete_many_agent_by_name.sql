-- Completions gathered into one call (0023) read each execution's agent by its name (issue #12).
--
-- The guards named the agent through the execution row (`a.name = e.agent`), and the plan cached
-- for that UPDATE joined agents to it: a sequential scan of every agent row under the guards'
-- filter, then the join on the name. The filter parses the breaker config's JSON, so each
-- completion parsed it once per agent in the table (150 agents: 150 parses, 6-8 % of PostgreSQL's
-- CPU during W1), and a deployment with more agents paid more for every completion. The agent is
-- known before the UPDATE (the locking pass reads it: an execution's agent never changes), so the
-- guards now take it as a value and read one agent row and its subscriptions. Nothing else
-- changes. Never edit a shipped migration: add a new numbered file.
CREATE OR REPLACE FUNCTION baton_complete_many(
  p_id TEXT[],
  p_token TEXT[],
  p_status TEXT[],
  p_at BIGINT[],
  p_actor TEXT[],
  p_result TEXT[],
  p_error_code TEXT[],
  p_error_message TEXT[],
  p_usage TEXT[],
  p_reason TEXT[]
) RETURNS SETOF executions LANGUAGE plpgsql AS $$
DECLARE
  agent_of TEXT[] := array_fill(NULL::TEXT, ARRAY[coalesce(array_length(p_id, 1), 0)]);
  one TEXT;
  i BIGINT;
  r executions;
BEGIN
  FOR i IN SELECT u.ord FROM unnest(p_id) WITH ORDINALITY AS u(id, ord) ORDER BY u.id LOOP
    SELECT agent INTO one FROM executions WHERE id = p_id[i] FOR NO KEY UPDATE;
    IF FOUND THEN
      agent_of[i] := one;
    END IF;
  END LOOP;
  FOR i IN
    SELECT u.ord FROM unnest(agent_of, p_id) WITH ORDINALITY AS u(agent, id, ord) WHERE u.agent IS NOT NULL ORDER BY u.agent, u.id
  LOOP
    CONTINUE WHEN p_status[i] = 'failed';
    one := agent_of[i];
    UPDATE executions e SET
      status = p_status[i], completed_at = p_at[i], duration_ms = p_at[i] - e.started_at, lease_expires_at = NULL,
      result = p_result[i], error_code = p_error_code[i], error_message = p_error_message[i], usage = p_usage[i],
      changed_at = p_at[i], changed_by = p_actor[i], change_reason = p_reason[i]
    WHERE e.id = p_id[i] AND e.lease_token = p_token[i] AND e.status IN ('running', 'queued') AND e.group_id IS NULL
      AND EXISTS (
        SELECT 1 FROM agents a
        WHERE a.name = one AND a.budget IS NULL
          AND (a.breaker_config IS NULL OR (a.breaker_state = 'closed' AND a.breaker_consecutive = 0
               AND a.breaker_recent = repeat('0', (a.breaker_config::json ->> 'window')::int))))
      AND NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.source_agent = one AND s.enabled = 1)
    RETURNING e.* INTO r;
    IF FOUND THEN
      RETURN NEXT r;
    END IF;
  END LOOP;
END;
$$;
