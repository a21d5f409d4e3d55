-- The fast paths' facts, kept by the engine (src/engine/fast-path-facts.ts) from the rules written
-- once in TypeScript (src/domain/admission.ts, src/domain/fast-paths.ts): 1 where a claim or a
-- completion may skip the engine's transaction. The claim and completion functions read these
-- columns and nothing else about holds or side effects: a new hold, or a new side effect of a
-- completion, changes TypeScript only.
-- Never edit a shipped migration: add a new numbered file.
-- Each check is a domain, as the other single-column checks of these hot tables: PostgreSQL reads
-- a domain's check once per session, a table's at the start of every statement on the table.
CREATE DOMAIN agents_fast_claim AS integer CONSTRAINT agents_fast_claim_check CHECK (VALUE IN (0, 1));
CREATE DOMAIN agents_fast_complete AS integer CONSTRAINT agents_fast_complete_check CHECK (VALUE IN (0, 1));
CREATE DOMAIN executions_fast_complete AS integer CONSTRAINT executions_fast_complete_check CHECK (VALUE IN (0, 1));
ALTER TABLE agents
  ADD COLUMN fast_claim agents_fast_claim NOT NULL DEFAULT 0,
  ADD COLUMN fast_complete agents_fast_complete NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN fast_complete executions_fast_complete NOT NULL DEFAULT 1;

-- The facts of the rows already there, as the rules say today.
UPDATE agents a SET
  fast_claim = (a.paused_at IS NULL AND a.lapse_hold_at IS NULL AND a.budget IS NULL
    AND (a.breaker_config IS NULL OR a.breaker_state = 'closed'))::int,
  fast_complete = (a.budget IS NULL
    AND (a.breaker_config IS NULL OR (a.breaker_state = 'closed' AND a.breaker_consecutive = 0
      AND a.breaker_recent = repeat('0', (a.breaker_config::json ->> 'window')::int)))
    AND NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.source_agent = a.name AND s.enabled = 1))::int;
UPDATE executions SET fast_complete = 0 WHERE group_id IS NOT NULL AND status IN ('queued', 'running');

-- Claims: an agent is decided here when its delivery matches and its fact allows; otherwise the
-- engine's transaction decides (src/engine/transitions/admit.ts). Otherwise as before.
CREATE OR REPLACE FUNCTION baton_claim_many(
  p_agent TEXT[],
  p_delivery TEXT[],
  p_owner TEXT[],
  p_max INTEGER[],
  p_token TEXT[],
  p_token_from INTEGER[],
  p_now BIGINT[],
  p_stamp_every BIGINT,
  p_max_bytes BIGINT[]
) RETURNS TABLE (claim_agent TEXT, claim_state TEXT, claimed executions) LANGUAGE plpgsql
-- Candidates through executions_admission whatever plan a connection keeps: no plan that sorts.
SET enable_sort = off
SET jit = off
AS $$
DECLARE
  i BIGINT;
  cap INTEGER;
  seated INTEGER;
  stamped BIGINT;
  free INTEGER;
  taken INTEGER;
  places TID[];
  sizes BIGINT[];
  spent BIGINT;
  keyed BOOLEAN;
  k INTEGER;
  r executions;
BEGIN
  FOR i IN SELECT u.ord FROM unnest(p_agent) WITH ORDINALITY AS u(agent, ord) ORDER BY u.agent, u.ord LOOP
    claim_agent := p_agent[i];
    claimed := NULL;
    SELECT a.max_parallel, a.running_count, a.last_claim_at INTO cap, seated, stamped
      FROM agents a
      WHERE a.name = p_agent[i] AND a.delivery = p_delivery[i] AND a.fast_claim = 1
      FOR NO KEY UPDATE;
    IF NOT FOUND THEN
      claim_state := 'undecided';
      RETURN NEXT;
      CONTINUE;
    END IF;
    free := greatest(0, least(p_max[i], cap - seated));
    places := NULL;
    keyed := FALSE;
    IF free > 0 THEN
      SELECT array_agg(c.place ORDER BY c.priority, c.queued_at, c.id), array_agg(c.bytes ORDER BY c.priority, c.queued_at, c.id),
          coalesce(bool_or(c.serial_key IS NOT NULL), FALSE)
        INTO places, sizes, keyed
        FROM (
          SELECT e.ctid AS place, e.serial_key, e.priority, e.queued_at, e.id,
              octet_length(e.message)::BIGINT + octet_length(e.payload)::BIGINT AS bytes
            FROM executions e
            WHERE e.agent = p_agent[i] AND e.status = 'queued' AND (e.run_after IS NULL OR e.run_after <= p_now[i])
            ORDER BY e.priority, e.queued_at, e.id
            LIMIT free
            FOR NO KEY UPDATE SKIP LOCKED
        ) c;
    END IF;
    IF keyed THEN
      claim_state := 'undecided';
      RETURN NEXT;
      CONTINUE;
    END IF;
    taken := 0;
    spent := 0;
    FOR k IN 1 .. coalesce(array_length(places, 1), 0) LOOP
      EXIT WHEN taken > 0 AND spent + sizes[k] > p_max_bytes[i];
      UPDATE executions x SET
        status = 'running', attempt = x.attempt + 1, lease_owner = p_owner[i], lease_token = p_token[p_token_from[i] + taken],
        lease_expires_at = p_now[i] + x.lease_ttl_seconds * 1000, heartbeat_at = p_now[i], started_at = p_now[i],
        deadline_at = p_now[i] + x.timeout_seconds * 1000,
        changed_at = p_now[i], changed_by = p_owner[i], change_reason = 'admitted'
      WHERE x.ctid = places[k] AND x.status = 'queued'
      RETURNING x.* INTO r;
      IF FOUND THEN
        taken := taken + 1;
        spent := spent + sizes[k];
        claim_state := 'row';
        claimed := r;
        RETURN NEXT;
      END IF;
    END LOOP;
    IF stamped IS NULL OR p_now[i] - stamped >= p_stamp_every THEN
      UPDATE agents SET last_claim_at = p_now[i] WHERE name = p_agent[i] AND (last_claim_at IS NULL OR last_claim_at < p_now[i]);
    END IF;
    claim_state := 'decided';
    claimed := NULL;
    RETURN NEXT;
  END LOOP;
END;
$$;

-- Completions: an execution is completed here when its own fact and its agent's allow; otherwise
-- (nothing written for it) the engine's transaction completes it with what it causes. Which
-- outcomes may come here is the engine's to say (a failure never does). Otherwise as before.
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
    one := agent_of[i];
    UPDATE executions e SET
      status = p_status[i], completed_at = p_at[i], duration_ms = p_at[i] - e.started_at, lease_expires_at = NULL,
      result = p_result[i], error_code = p_error_code[i], error_message = p_error_message[i], usage = p_usage[i],
      changed_at = p_at[i], changed_by = p_actor[i], change_reason = p_reason[i]
    WHERE e.id = p_id[i] AND e.lease_token = p_token[i] AND e.status IN ('running', 'queued') AND e.fast_complete = 1
      AND EXISTS (SELECT 1 FROM agents a WHERE a.name = one AND a.fast_complete = 1)
    RETURNING e.* INTO r;
    IF FOUND THEN
      RETURN NEXT r;
    END IF;
  END LOOP;
END;
$$;
