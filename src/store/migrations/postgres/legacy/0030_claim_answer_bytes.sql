-- Claims answer a bounded number of bytes (issue #10's bounded answers): baton_claim_many (0025)
-- takes p_max_bytes, one per element, and stops taking an agent's rows once those it took carry
-- that many bytes of message and payload (always one when it can), as transitions/admit.ts does on
-- the transaction path. A claim of 100 tasks at the payload limit answered 25 MiB, and reading and
-- writing it held the server's event loop 0.28-0.39 s on SQLite. The rows past the bound stay queued
-- (locked only until this statement's transaction ends). Nothing else changes. Never edit a
-- shipped migration: add a new numbered file.
DROP FUNCTION baton_claim_many(TEXT[], TEXT[], TEXT[], INTEGER[], TEXT[], INTEGER[], BIGINT[], BIGINT);
CREATE FUNCTION baton_claim_many(
  p_agent TEXT[],
  p_delivery TEXT[],
  p_owner TEXT[],
  p_max INTEGER[],
  p_token TEXT[],
  p_token_from INTEGER[],
  p_now BIGINT[],
  p_stamp_every BIGINT,
  p_max_bytes BIGINT[]
) RETURNS TABLE (claim_agent TEXT, claim_state TEXT, claimed executions) LANGUAGE plpgsql AS $$
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
      WHERE a.name = p_agent[i] AND a.delivery = p_delivery[i] AND a.paused_at IS NULL AND a.lapse_hold_at IS NULL
        AND a.budget IS NULL AND (a.breaker_config IS NULL OR a.breaker_state = 'closed')
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
