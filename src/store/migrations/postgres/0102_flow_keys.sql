-- Concurrency keys (src/domain/flow.ts, src/engine/flow-keys.ts): a task's key, its fairness round,
-- the agent's per-key limits, and one row of state per (agent, key).
-- Never edit a shipped migration: add a new numbered file.
CREATE DOMAIN executions_debounce_seconds AS integer
  CONSTRAINT executions_debounce_seconds_check CHECK (VALUE IS NULL OR VALUE >= 1 AND VALUE <= 3600);
CREATE DOMAIN agents_key_max_parallel AS integer
  CONSTRAINT agents_key_max_parallel_check CHECK (VALUE IS NULL OR VALUE >= 1);
ALTER TABLE executions
  ADD COLUMN flow_key TEXT,
  ADD COLUMN fair_round BIGINT NOT NULL DEFAULT 0,
  -- A debounced task's window (seconds): a keyed submit that asks for it folds into the task while queued and not due.
  ADD COLUMN debounce_seconds executions_debounce_seconds;
ALTER TABLE agents
  ADD COLUMN admit_round BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN key_max_parallel agents_key_max_parallel,
  ADD COLUMN key_overrides TEXT,
  ADD COLUMN key_throttle TEXT;

CREATE TABLE flow_keys (
  agent TEXT NOT NULL REFERENCES agents (name) ON DELETE CASCADE,
  flow_key TEXT NOT NULL,
  last_round BIGINT NOT NULL DEFAULT 0,
  throttle_tat BIGINT,
  PRIMARY KEY (agent, flow_key)
);

-- Keys whose throttle is closed (admission leaves their tasks out).
CREATE INDEX flow_keys_throttle ON flow_keys (agent, throttle_tat) WHERE throttle_tat IS NOT NULL;

-- Admission order: (priority, fair_round, queued_at, id).
DROP INDEX executions_admission;
CREATE INDEX executions_admission ON executions (agent, priority, fair_round, queued_at, id) WHERE status = 'queued';
-- Seats in use per key.
CREATE INDEX executions_key_running ON executions (agent, flow_key) WHERE flow_key IS NOT NULL AND status = 'running';
-- A key's live tasks: singleton, debounce, the live keys read.
CREATE INDEX executions_key_live ON executions (agent, flow_key, status) WHERE flow_key IS NOT NULL AND status IN ('queued', 'running');

-- Claims in admission order (priority, fair_round, queued_at, id); the agent's admit_round rises to
-- the highest round admitted (on the agent row the claim holds). An agent with a per-key cap or
-- throttle has fast_claim = 0 (src/domain/flow.ts), so it never comes here. Otherwise as before.
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
  top BIGINT;
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
      SELECT array_agg(c.place ORDER BY c.priority, c.fair_round, c.queued_at, c.id),
          array_agg(c.bytes ORDER BY c.priority, c.fair_round, c.queued_at, c.id),
          coalesce(bool_or(c.serial_key IS NOT NULL), FALSE)
        INTO places, sizes, keyed
        FROM (
          SELECT e.ctid AS place, e.serial_key, e.priority, e.fair_round, e.queued_at, e.id,
              octet_length(e.message)::BIGINT + octet_length(e.payload)::BIGINT AS bytes
            FROM executions e
            WHERE e.agent = p_agent[i] AND e.status = 'queued' AND (e.run_after IS NULL OR e.run_after <= p_now[i])
            ORDER BY e.priority, e.fair_round, e.queued_at, e.id
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
    top := 0;
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
        top := greatest(top, r.fair_round);
        RETURN NEXT;
      END IF;
    END LOOP;
    IF top > 0 THEN
      UPDATE agents SET admit_round = top WHERE name = p_agent[i] AND admit_round < top;
    END IF;
    IF stamped IS NULL OR p_now[i] - stamped >= p_stamp_every THEN
      UPDATE agents SET last_claim_at = p_now[i] WHERE name = p_agent[i] AND (last_claim_at IS NULL OR last_claim_at < p_now[i]);
    END IF;
    claim_state := 'decided';
    claimed := NULL;
    RETURN NEXT;
  END LOOP;
END;
$$;
