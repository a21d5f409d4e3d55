-- baton_claim_many also answers 'empty' for an agent whose claim took every row it had queued: the
-- agent's backlog counters (agent_backlog.queued_in less agents.queued_out, which the engine keeps:
-- src/engine/backlog.ts), read after its takes under its row lock, say none is left. SQLite's
-- admission says the same from the counters it reads with the agent (admit.ts, onNothingQueued), so a
-- look right after need not cover the agent (IdleAgents) on either store. Otherwise as in 0118.
-- Never edit a shipped migration: add a new numbered file.
CREATE OR REPLACE FUNCTION baton_claim_many(p_agent text[], p_delivery text[], p_owner text[], p_max integer[], p_token text[], p_token_from integer[], p_now bigint[], p_stamp_every bigint, p_max_bytes bigint[], p_key text[])
 RETURNS TABLE(claim_agent text, claim_state text, claimed executions)
 LANGUAGE plpgsql
 SET enable_sort TO 'off'
 SET jit TO 'off'
AS $function$
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
    claim_state := CASE WHEN free > 0 AND places IS NULL AND (
        SELECT e.id FROM executions e WHERE e.agent = p_agent[i] AND e.status = 'queued'
        ORDER BY e.priority, e.fair_round, e.queued_at, e.id LIMIT 1) IS NULL THEN 'empty'
      WHEN taken > 0 AND (SELECT b.queued_in - a.queued_out FROM agents a JOIN agent_backlog b ON b.agent = a.name
        WHERE a.name = p_agent[i]) <= 0 THEN 'empty' ELSE 'decided' END;
    claimed := NULL;
    RETURN NEXT;
  END LOOP;
END;
$function$;
