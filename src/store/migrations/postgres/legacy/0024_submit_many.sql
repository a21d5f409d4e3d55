-- Plain submits, many in one call (issue #12). src/engine/transitions/create.ts
-- (submitManyInOneStatement) sends the plain submits a process is asked for together as arrays,
-- one element per execution: one round trip and one commit instead of one each.
--
-- The protocol is baton_submit's (migration 0020), for several agents at once: the new-work turn
-- of every agent of the call first, in name order (as lockAgentsForNewWork takes them, so a call
-- and a transaction-path creator never wait on each other in a cycle); then each submit in the
-- order given, its backlog counted by its own statement (a fresh snapshot, which sees the rows
-- this call inserted before it), its row and its creation audit entry written together. A submit
-- refused — no such agent, or its backlog full — is left out of the result and writes nothing;
-- the caller submits it alone, which says why.
--
-- baton_submit becomes this call with one element, so a submit is written by one piece of SQL.
-- Never edit a shipped migration: add a new numbered file.
CREATE FUNCTION baton_submit_many(
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
    CONTINUE WHEN (SELECT count(*) FROM executions WHERE agent = p_agent[i] AND status = 'queued') >= a.max_backlog;
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

CREATE OR REPLACE FUNCTION baton_submit(
  p_id TEXT,
  p_agent TEXT,
  p_trigger_kind TEXT,
  p_origin TEXT,
  p_message TEXT,
  p_payload TEXT,
  p_priority INTEGER,
  p_run_after BIGINT,
  p_idempotency_key TEXT,
  p_retry_policy TEXT,
  p_at BIGINT,
  p_actor TEXT,
  p_audit_detail TEXT
) RETURNS SETOF executions LANGUAGE plpgsql AS $$
DECLARE
  r executions;
  cap INTEGER;
BEGIN
  FOR r IN
    SELECT * FROM baton_submit_many(ARRAY[p_id], ARRAY[p_agent], ARRAY[p_trigger_kind], ARRAY[p_origin], ARRAY[p_message],
      ARRAY[p_payload], ARRAY[p_priority], ARRAY[p_run_after], ARRAY[p_idempotency_key], ARRAY[p_retry_policy], ARRAY[p_at],
      ARRAY[p_actor], ARRAY[p_audit_detail])
  LOOP
    RETURN NEXT r;
    RETURN;
  END LOOP;
  -- Refused, nothing written: say why, as before (SQLSTATE BTNOA, or BTFUL with the agent's max_backlog).
  SELECT max_backlog INTO cap FROM agents WHERE name = p_agent;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'agent % not found', p_agent USING ERRCODE = 'BTNOA';
  END IF;
  RAISE EXCEPTION 'agent % backlog is full', p_agent USING ERRCODE = 'BTFUL', DETAIL = cap::text;
END;
$$;
