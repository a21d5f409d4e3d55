-- Completions that cause nothing else, many in one call (issue #12). src/engine/gather.ts gathers
-- the completions a process is asked for together; transitions/complete.ts
-- (completeAloneMany) sends them here as arrays, one element per execution, and every later call
-- on a connection reuses the plans cached for its statements.
--
-- Each execution is its own guarded UPDATE, found by primary key and nothing else: one statement
-- over all of them let the planner read them through a status or agent index whenever its
-- statistics said few rows were live (a young table, a backlog grown since the last ANALYZE), and
-- a plan cached then walked every live row once per call. The guards are completeAlone's: the
-- token, a live status, no group, an outcome that is not a failure, and an agent with no budget,
-- no breaker a success would move and no enabled subscription. An execution the guards refuse is
-- left out of the result and nothing is written for it; the caller completes it in a transaction,
-- which explains a refusal.
--
-- Locks, in the order that keeps this call out of lock cycles: first every execution row, in id
-- order, holding no agent row (so a reaper or a completion elsewhere holding one of these rows
-- finishes first); then the updates in agent name order, each taking its agent row (the seat
-- counter, in the event trigger), so two calls at once take agent rows in the same order. Never
-- edit a shipped migration: add a new numbered file.
CREATE FUNCTION baton_complete_many(
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
    UPDATE executions e SET
      status = p_status[i], completed_at = p_at[i], duration_ms = p_at[i] - e.started_at, lease_expires_at = NULL,
      result = p_result[i], error_code = p_error_code[i], error_message = p_error_message[i], usage = p_usage[i],
      changed_at = p_at[i], changed_by = p_actor[i], change_reason = p_reason[i]
    WHERE e.id = p_id[i] AND e.lease_token = p_token[i] AND e.status IN ('running', 'queued') AND e.group_id IS NULL
      AND EXISTS (
        SELECT 1 FROM agents a
        WHERE a.name = e.agent AND a.budget IS NULL
          AND (a.breaker_config IS NULL OR (a.breaker_state = 'closed' AND a.breaker_consecutive = 0
               AND a.breaker_recent = repeat('0', (a.breaker_config::json ->> 'window')::int))))
      AND NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.source_agent = e.agent AND s.enabled = 1)
    RETURNING e.* INTO r;
    IF FOUND THEN
      RETURN NEXT r;
    END IF;
  END LOOP;
END;
$$;
