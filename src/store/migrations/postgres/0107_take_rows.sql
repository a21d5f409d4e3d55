-- The rows one admission takes, queued → running, in one call (FastPaths.takeRows): each row
-- updated by its id in the order given, so the event trigger counts the seats in admission order
-- as the admission transaction's own updates would. The engine decides which rows (its admission
-- transaction holds their locks); this only writes them.
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
    WHERE x.id = p_id[i] AND x.status = 'queued'
    RETURNING x.* INTO r;
    IF FOUND THEN
      RETURN NEXT r;
    END IF;
  END LOOP;
END
$$;
