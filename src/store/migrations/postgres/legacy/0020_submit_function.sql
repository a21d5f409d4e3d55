-- A submit in one statement, one round trip (issue #12). The transaction path (engine.submit:
-- lockAgentsForNewWork, then createExecutions) takes four round trips on PostgreSQL: START, the
-- new-work turn, the insert with its audit row, COMMIT. The turn cannot ride the insert's own
-- statement: a statement reads one snapshot, taken before it waits for the turn, so its backlog
-- count would miss the rows of the creator it waited for. A function's statements each read a
-- fresh snapshot (READ COMMITTED), so this one takes the turn, then counts, then inserts — the
-- same protocol, in one call, with its plans cached per connection.
--
-- It writes exactly what the transaction path writes for a plain submit (queuedValues over the
-- engine's newRow, the creation audit entry); test/one-statement.test.ts compares the two rows
-- column by column. Refusals are errors, so nothing is written: SQLSTATE BTNOA (no such agent)
-- and BTFUL (backlog full, DETAIL the agent's max_backlog). Never edit a shipped migration: add a
-- new numbered file.
CREATE FUNCTION baton_submit(
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
  a agents;
BEGIN
  -- The new-work turn, as lockAgentsForNewWork takes it (store/postgres.ts holdForNewWork): an
  -- existence lock on the agent row, then the per-agent key, held until this statement commits.
  SELECT * INTO a FROM agents WHERE name = p_agent FOR KEY SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'agent % not found', p_agent USING ERRCODE = 'BTNOA';
  END IF;
  PERFORM pg_advisory_xact_lock(hashtext('new-work:' || p_agent));
  -- A fresh snapshot: every creator that held the turn before this one has committed.
  IF (SELECT count(*) FROM executions WHERE agent = p_agent AND status = 'queued') >= a.max_backlog THEN
    RAISE EXCEPTION 'agent % backlog is full', p_agent USING ERRCODE = 'BTFUL', DETAIL = a.max_backlog::text;
  END IF;
  RETURN QUERY
    WITH created AS (
      INSERT INTO executions (id, agent, trigger_kind, origin, message, payload, priority, run_after, max_redeliveries,
        timeout_seconds, lease_ttl_seconds, idempotency_key, retry_policy, status, attempt, created_at, queued_at,
        changed_at, changed_by, change_reason)
      VALUES (p_id, p_agent, p_trigger_kind, p_origin, p_message, p_payload, p_priority, p_run_after, a.max_redeliveries,
        a.timeout_seconds, a.lease_ttl_seconds, p_idempotency_key, coalesce(p_retry_policy, a.retry_policy), 'queued', 0, p_at, p_at,
        p_at, p_actor, 'created')
      RETURNING *
    ), audited AS (
      INSERT INTO audit_log (at, actor, action, subject, execution_id, detail)
      SELECT p_at, p_actor, 'execution.create', p_agent, created.id, p_audit_detail FROM created
    )
    SELECT * FROM created;
END;
$$;
