-- Plain submits gathered into one call, written by one INSERT instead of one per submit (issue
-- #12). src/engine/gather.ts sends the plain submits a process is asked for together (W1 in-process
-- averaged 32 a call): migration 0031's loop ran, per submit, a read of the agent, a read of its
-- backlog counters, and an INSERT with its audit row, whose statement-level trigger wrote one event
-- and updated agent_backlog. Each of those is an executor start-up in PostgreSQL (every index of
-- executions opened, its partial predicates prepared) for one row: alternated with the loop, W1
-- in-process on PostgreSQL used 0.47-0.52 ms of PostgreSQL CPU per task against 0.63-0.79 ms.
--
-- The protocol is unchanged: the new-work turn of every agent of the call first, in name order;
-- then the submits, in the order given. A submit is refused (left out of the result, nothing
-- written) when its agent does not exist or its backlog is full; the caller submits it alone, which
-- says why. Under the turns no other creator adds to these agents' backlogs, so the k-th submit of
-- an agent in the call fits when the agent's backlog (queued_in - queued_out, read once after the
-- turns) plus k is at most max_backlog: what the loop decided submit by submit, as the loop's later
-- reads could only see claims take rows out. Rows, audit entries and (by the trigger) events are
-- written in the order given. Each submit's agent and counters are read by name, a lookup per
-- submit (the LATERAL subquery, kept apart by OFFSET 0): joined to the submits as tables, the plan
-- made while the agents table was young (never analyzed: about 140 rows assumed) scanned every agent
-- on every call, however many there became (test/plans.test.ts checks the lookup). Never edit a
-- shipped migration: add a new numbered file.
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
) RETURNS SETOF executions LANGUAGE plpgsql
-- The statement's plan made once and kept: PostgreSQL's own choice made a new one for every call
-- (a plan for any number of submits looks costlier than one made for the call's own count), and
-- planning it cost a lone submit 0.4-0.5 ms (1,117 against 784 µs a call in a scratch loop).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  turn TEXT;
BEGIN
  FOR turn IN SELECT DISTINCT u.agent FROM unnest(p_agent) AS u(agent) ORDER BY u.agent LOOP
    PERFORM 1 FROM agents WHERE name = turn FOR KEY SHARE;
    IF FOUND THEN
      PERFORM pg_advisory_xact_lock(hashtext('new-work:' || turn));
    END IF;
  END LOOP;
  RETURN QUERY
    WITH asked AS (
      SELECT u.*, row_number() OVER (PARTITION BY u.agent ORDER BY u.ord) AS nth
      FROM unnest(p_id, p_agent, p_trigger_kind, p_origin, p_message, p_payload, p_priority, p_run_after, p_idempotency_key,
          p_retry_policy, p_at, p_actor, p_audit_detail)
        WITH ORDINALITY AS u(id, agent, trigger_kind, origin, message, payload, priority, run_after, idempotency_key,
          retry_policy, at, actor, audit_detail, ord)
    ), fits AS MATERIALIZED (
      SELECT s.*, a.max_redeliveries, a.timeout_seconds, a.lease_ttl_seconds, a.agent_retry_policy
      FROM asked s
      CROSS JOIN LATERAL (
        SELECT a.max_redeliveries, a.timeout_seconds, a.lease_ttl_seconds, a.retry_policy AS agent_retry_policy,
          a.max_backlog, b.queued_in - a.queued_out AS queued
        FROM agents a
        JOIN agent_backlog b ON b.agent = a.name
        WHERE a.name = s.agent
        OFFSET 0
      ) a
      WHERE a.queued + s.nth <= a.max_backlog
    ), created AS (
      INSERT INTO executions (id, agent, trigger_kind, origin, message, payload, priority, run_after, max_redeliveries,
        timeout_seconds, lease_ttl_seconds, idempotency_key, retry_policy, status, attempt, created_at, queued_at,
        changed_at, changed_by, change_reason)
      SELECT f.id, f.agent, f.trigger_kind, f.origin, f.message, f.payload, f.priority, f.run_after, f.max_redeliveries,
        f.timeout_seconds, f.lease_ttl_seconds, f.idempotency_key, coalesce(f.retry_policy, f.agent_retry_policy),
        'queued', 0, f.at, f.at, f.at, f.actor, 'created'
      FROM fits f ORDER BY f.ord
      RETURNING *
    ), audited AS (
      INSERT INTO audit_log (at, actor, action, subject, execution_id, detail)
      SELECT f.at, f.actor, 'execution.create', f.agent, c.id, f.audit_detail
      FROM created c JOIN fits f ON f.id = c.id
      ORDER BY f.ord
    )
    SELECT * FROM created;
END;
$$;
