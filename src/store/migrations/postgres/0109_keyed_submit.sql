-- A keyed submit in one call (FastPaths.submitOne / submitGathered), and its fairness round taken
-- by one function on every PostgreSQL path.
--
-- baton_key_rounds is how PostgreSQL takes a key's rounds (src/domain/flow.ts: a keyed task takes
-- round max(last round of its key + 1, agent.admit_round)): the engine's creation transaction
-- calls it (StoreAdapter.keyRounds) and so does baton_submit_many below, so the rule has one text
-- here. p_n rounds are taken, the last returned. p_room: only while the agent's backlog has room
-- for p_n more (a `check` creation: a refused task takes no round; null returned); false: the
-- caller counted the room under the same new-work turn. The caller holds the agent's new-work turn.
-- Never edit a shipped migration: add a new numbered file.
CREATE OR REPLACE FUNCTION baton_key_rounds(p_agent text, p_key text, p_n integer, p_room boolean)
RETURNS bigint LANGUAGE sql AS $$
  INSERT INTO flow_keys AS k (agent, flow_key, last_round)
  SELECT a.name, p_key, a.admit_round + p_n - 1
  FROM agents a JOIN agent_backlog b ON b.agent = a.name
  WHERE a.name = p_agent AND (NOT p_room OR b.queued_in - a.queued_out + p_n <= a.max_backlog)
  ON CONFLICT (agent, flow_key) DO UPDATE SET last_round =
    CASE WHEN k.last_round + p_n > excluded.last_round THEN k.last_round + p_n ELSE excluded.last_round END
  RETURNING last_round
$$;

-- baton_submit_many with each submit's key (null: none): a keyed row that fits takes its round from
-- baton_key_rounds, all of one key's rows of the call at once, in the order asked. Debounce and
-- singleton are not here: those submits run the engine's transaction. The forms without keys stay,
-- as calls of these (below), for processes of the version before while versions are mixed.

CREATE FUNCTION baton_submit_many(p_id text[], p_agent text[], p_trigger_kind text[], p_origin text[], p_message text[],
  p_payload text[], p_priority integer[], p_run_after bigint[], p_idempotency_key text[], p_retry_policy text[], p_at bigint[],
  p_actor text[], p_audit_detail text[], p_flow_key text[])
RETURNS SETOF executions LANGUAGE plpgsql
SET plan_cache_mode TO 'force_generic_plan'
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
          p_retry_policy, p_at, p_actor, p_audit_detail, p_flow_key)
        WITH ORDINALITY AS u(id, agent, trigger_kind, origin, message, payload, priority, run_after, idempotency_key,
          retry_policy, at, actor, audit_detail, flow_key, ord)
    ), fits AS MATERIALIZED (
      SELECT s.*, a.max_redeliveries, a.timeout_seconds, a.lease_ttl_seconds, a.agent_retry_policy,
        row_number() OVER (PARTITION BY s.agent, s.flow_key ORDER BY s.ord) AS key_nth
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
    ), rounds AS MATERIALIZED (
      SELECT g.agent, g.flow_key, g.n, baton_key_rounds(g.agent, g.flow_key, g.n::int, false) AS last_round
      FROM (SELECT f.agent, f.flow_key, count(*) AS n FROM fits f WHERE f.flow_key IS NOT NULL GROUP BY f.agent, f.flow_key) g
    ), created AS (
      INSERT INTO executions (id, agent, trigger_kind, origin, message, payload, priority, run_after, max_redeliveries,
        timeout_seconds, lease_ttl_seconds, idempotency_key, retry_policy, flow_key, fair_round, status, attempt, created_at,
        queued_at, changed_at, changed_by, change_reason)
      SELECT f.id, f.agent, f.trigger_kind, f.origin, f.message, f.payload, f.priority, f.run_after, f.max_redeliveries,
        f.timeout_seconds, f.lease_ttl_seconds, f.idempotency_key, coalesce(f.retry_policy, f.agent_retry_policy), f.flow_key,
        coalesce(r.last_round - r.n + f.key_nth, 0), 'queued', 0, f.at, f.at, f.at, f.actor, 'created'
      FROM fits f LEFT JOIN rounds r ON r.agent = f.agent AND r.flow_key = f.flow_key
      ORDER BY f.ord
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

CREATE FUNCTION baton_submit(p_id text, p_agent text, p_trigger_kind text, p_origin text, p_message text, p_payload text,
  p_priority integer, p_run_after bigint, p_idempotency_key text, p_retry_policy text, p_at bigint, p_actor text,
  p_audit_detail text, p_flow_key text)
RETURNS SETOF executions LANGUAGE plpgsql AS $$
DECLARE
  r executions;
  cap INTEGER;
BEGIN
  FOR r IN
    SELECT * FROM baton_submit_many(ARRAY[p_id], ARRAY[p_agent], ARRAY[p_trigger_kind], ARRAY[p_origin], ARRAY[p_message],
      ARRAY[p_payload], ARRAY[p_priority], ARRAY[p_run_after], ARRAY[p_idempotency_key], ARRAY[p_retry_policy], ARRAY[p_at],
      ARRAY[p_actor], ARRAY[p_audit_detail], ARRAY[p_flow_key])
  LOOP
    RETURN NEXT r;
    RETURN;
  END LOOP;
  -- Refused, nothing written: say why (SQLSTATE BTNOA, or BTFUL with the agent's max_backlog).
  SELECT max_backlog INTO cap FROM agents WHERE name = p_agent;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'agent % not found', p_agent USING ERRCODE = 'BTNOA';
  END IF;
  RAISE EXCEPTION 'agent % backlog is full', p_agent USING ERRCODE = 'BTFUL', DETAIL = cap::text;
END;
$$;

CREATE OR REPLACE FUNCTION baton_submit_many(p_id text[], p_agent text[], p_trigger_kind text[], p_origin text[], p_message text[],
  p_payload text[], p_priority integer[], p_run_after bigint[], p_idempotency_key text[], p_retry_policy text[], p_at bigint[],
  p_actor text[], p_audit_detail text[])
RETURNS SETOF executions LANGUAGE sql AS $$
  SELECT * FROM baton_submit_many(p_id, p_agent, p_trigger_kind, p_origin, p_message, p_payload, p_priority, p_run_after,
    p_idempotency_key, p_retry_policy, p_at, p_actor, p_audit_detail, array_fill(NULL::text, ARRAY[cardinality(p_id)]))
$$;

CREATE OR REPLACE FUNCTION baton_submit(p_id text, p_agent text, p_trigger_kind text, p_origin text, p_message text, p_payload text,
  p_priority integer, p_run_after bigint, p_idempotency_key text, p_retry_policy text, p_at bigint, p_actor text,
  p_audit_detail text)
RETURNS SETOF executions LANGUAGE sql AS $$
  SELECT * FROM baton_submit(p_id, p_agent, p_trigger_kind, p_origin, p_message, p_payload, p_priority, p_run_after,
    p_idempotency_key, p_retry_policy, p_at, p_actor, p_audit_detail, NULL::text)
$$;
