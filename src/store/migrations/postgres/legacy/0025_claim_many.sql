-- Claims, many in one call (issue #12). src/engine/gather.ts gathers the claims a process is
-- asked for together (one per agent per call); transitions/admit.ts (claimInOneStatement) sends
-- them here as arrays, one element per agent, and a lone claim is the same call with one element.
-- One round trip and one commit instead of one each.
--
-- Each claim is the common one: an agent with no hold (not paused, no lapse hold, no budget,
-- breaker off or closed) of the claimer's delivery admits its queued rows FIFO (priority,
-- queued_at, id) up to its free seats. Exactness across processes is the transaction path's:
-- the agent row is locked first (FOR NO KEY UPDATE; a lock reads the row's latest version, so
-- running_count is exact), candidates are locked SKIP LOCKED and limited by it, each update
-- re-checks `status = 'queued'`, and the event trigger adds each seat under the same lock, in
-- the order the rows are taken. A row is updated by its position (ctid): it is locked, so it
-- cannot move, and a Tid Scan is the plan whatever the statistics said when the plan was cached.
--
-- Every element answers with a row of its own (claim_state): 'decided' after the rows it took
-- ('row', claimed), or 'undecided' with nothing written for it — unknown agent, other delivery,
-- a hold, or a queued row with a serial key among its next candidates (a serial key's "none of
-- mine running" needs the transaction path's reads). The caller then admits it in a transaction,
-- which knows every rule and every refusal. The claim stamp (agents.last_claim_at) is written
-- here when due, under the lock already held.
--
-- Agents are taken in name order, as every caller that locks several agent rows takes them.
-- Never edit a shipped migration: add a new numbered file.
CREATE FUNCTION baton_claim_many(
  p_agent TEXT[],
  p_delivery TEXT[],
  p_owner TEXT[],
  p_max INTEGER[],
  p_token TEXT[],
  p_token_from INTEGER[],
  p_now BIGINT[],
  p_stamp_every BIGINT
) RETURNS TABLE (claim_agent TEXT, claim_state TEXT, claimed executions) LANGUAGE plpgsql AS $$
DECLARE
  i BIGINT;
  cap INTEGER;
  seated INTEGER;
  stamped BIGINT;
  free INTEGER;
  taken INTEGER;
  places TID[];
  keyed BOOLEAN;
  place TID;
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
      SELECT array_agg(c.place ORDER BY c.priority, c.queued_at, c.id), coalesce(bool_or(c.serial_key IS NOT NULL), FALSE)
        INTO places, keyed
        FROM (
          SELECT e.ctid AS place, e.serial_key, e.priority, e.queued_at, e.id
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
    FOREACH place IN ARRAY coalesce(places, '{}'::TID[]) LOOP
      UPDATE executions x SET
        status = 'running', attempt = x.attempt + 1, lease_owner = p_owner[i], lease_token = p_token[p_token_from[i] + taken],
        lease_expires_at = p_now[i] + x.lease_ttl_seconds * 1000, heartbeat_at = p_now[i], started_at = p_now[i],
        deadline_at = p_now[i] + x.timeout_seconds * 1000,
        changed_at = p_now[i], changed_by = p_owner[i], change_reason = 'admitted'
      WHERE x.ctid = place AND x.status = 'queued'
      RETURNING x.* INTO r;
      IF FOUND THEN
        taken := taken + 1;
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
