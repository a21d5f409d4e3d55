-- A claim that finds no queued row of its agent says so (claim_state 'empty' instead of
-- 'decided'), as the transaction path does (src/engine/transitions/admit.ts, onNothingQueued): a
-- long-polling claim that found its agent's queue empty then stays parked when a seat of the agent
-- frees (Waiters.wakeForSeat), since only new work can give it anything, and that is announced. It
-- is asked only where the claim had a free seat and took no candidate, as admit.ts asks it: one
-- seek into executions_admission, any queued row counting (run_after ahead, locked elsewhere).
-- Otherwise as in 0105.
-- Never edit a shipped migration: add a new numbered file.
CREATE OR REPLACE FUNCTION baton_claim_many(
  p_agent TEXT[],
  p_delivery TEXT[],
  p_owner TEXT[],
  p_max INTEGER[],
  p_token TEXT[],
  p_token_from INTEGER[],
  p_now BIGINT[],
  p_stamp_every BIGINT,
  p_max_bytes BIGINT[],
  p_key TEXT[]
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
    -- Read after the candidates, so a task queued after the key was revoked is never taken with it.
    IF keyed OR (p_key[i] IS NOT NULL AND places IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM api_keys k
          WHERE k.id = p_key[i] AND k.revoked_at IS NULL AND (k.agent IS NULL OR k.agent = p_agent[i]))) THEN
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
    claim_state := CASE WHEN free > 0 AND places IS NULL AND NOT EXISTS (
        SELECT 1 FROM executions e WHERE e.agent = p_agent[i] AND e.status = 'queued') THEN 'empty' ELSE 'decided' END;
    claimed := NULL;
    RETURN NEXT;
  END LOOP;
END;
$$;
