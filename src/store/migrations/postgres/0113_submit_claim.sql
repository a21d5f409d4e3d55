-- Plain submits and the claims parked in this process on their agents, in one call and one commit
-- (FastPaths.submitClaim): baton_submit_many, then baton_claim_many for those claimers, in that
-- order, as the two calls would run one after the other. It decides nothing they do not: each
-- keeps its locks, its checks and its answer (the claim part sees the rows the submit part wrote,
-- as a later transaction would). A call that fails writes nothing, and the engine then makes the
-- submits without the claims.
-- Never edit a shipped migration: add a new numbered file.
CREATE FUNCTION baton_submit_claim(p_id text[], p_agent text[], p_trigger_kind text[], p_origin text[], p_message text[],
  p_payload text[], p_priority integer[], p_run_after bigint[], p_idempotency_key text[], p_retry_policy text[], p_at bigint[],
  p_actor text[], p_audit_detail text[], p_flow_key text[],
  c_agent text[], c_delivery text[], c_owner text[], c_max integer[], c_token text[], c_token_from integer[], c_now bigint[],
  c_stamp_every bigint, c_max_bytes bigint[], c_key text[])
-- Each row made by the submits (claim_state 'submitted', claim_agent null), then baton_claim_many's rows.
RETURNS TABLE (claim_agent text, claim_state text, claimed executions) LANGUAGE plpgsql AS $$
BEGIN
  -- The claims' agent rows first, in name order, as baton_claim_many locks them: then no agent row
  -- is waited for while a new-work turn is held. A transaction that holds an agent's row and then
  -- asks for a turn (a completion whose follow-up work goes to that agent) waits for this call, or
  -- this call for it, never each for the other.
  PERFORM 1 FROM agents a WHERE a.name = ANY (c_agent) ORDER BY a.name FOR NO KEY UPDATE;
  RETURN QUERY SELECT NULL::text, 'submitted'::text, s
    FROM baton_submit_many(p_id, p_agent, p_trigger_kind, p_origin, p_message, p_payload, p_priority, p_run_after,
      p_idempotency_key, p_retry_policy, p_at, p_actor, p_audit_detail, p_flow_key) s;
  RETURN QUERY SELECT * FROM baton_claim_many(c_agent, c_delivery, c_owner, c_max, c_token, c_token_from, c_now, c_stamp_every,
    c_max_bytes, c_key);
END;
$$;
