-- baton_take_rows finds each row it takes through executions_pkey, whatever the statistics. Its
-- UPDATE is planned once a connection (five custom plans, then the generic plan kept until the
-- table is analysed). Planned on a young store (executions never analysed, executions_admission
-- still one page), `x.id = p_id[i] AND x.status = 'queued'` chose executions_admission: its
-- predicate is `status = 'queued'` and its last column is id, so every take read every queued row
-- of every agent, comparing ids, for the rest of the connection's life (docs/benchmarks.md, "A take
-- plan made young"). The guard is now written so that no partial index of queued rows answers it
-- (the planner proves a partial index usable only from a plain comparison): the same rows, the same
-- guard, and the primary key is the only index left for `x.id = …`.
-- Never edit a shipped migration: add a new numbered file.
CREATE OR REPLACE FUNCTION baton_take_rows(p_id text[], p_token text[], p_owner text, p_now bigint)
RETURNS SETOF executions LANGUAGE plpgsql AS $$
DECLARE
  r executions;
BEGIN
  FOR i IN 1 .. coalesce(array_length(p_id, 1), 0) LOOP
    UPDATE executions x SET
      status = 'running', attempt = x.attempt + 1, lease_owner = p_owner, lease_token = p_token[i],
      lease_expires_at = p_now + x.lease_ttl_seconds * 1000, heartbeat_at = p_now, started_at = p_now,
      deadline_at = p_now + x.timeout_seconds * 1000,
      changed_at = p_now, changed_by = p_owner, change_reason = 'admitted'
    WHERE x.id = p_id[i] AND x.status IS NOT DISTINCT FROM 'queued'
    RETURNING x.* INTO r;
    IF FOUND THEN
      RETURN NEXT r;
    END IF;
  END LOOP;
END
$$;
