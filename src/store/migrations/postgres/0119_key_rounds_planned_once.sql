-- baton_key_rounds (0109) takes the same rounds by the same statement, now run from PL/pgSQL so
-- that its plan is kept by the connection: as a SQL function PostgreSQL parsed, analysed and
-- planned its upsert again on every call, once per key of every keyed submit (the profile of a
-- keyed W1's backends: about 1.7 % of their CPU, docs/benchmarks.md). The agent's backlog row is
-- read only where p_room asks for the room (a one-time filter on the parameter); baton_submit_many
-- counts the room itself under the same turn, so its calls no longer read that row.
-- flow_keys is written by every keyed submit (its key's last round): its pages now keep room, as
-- agents' and agent_backlog's do, so that the update stays on its page (a HOT update, no new
-- entry in flow_keys_pkey); the pages written before keep their fill until rewritten.
-- Never edit a shipped migration: add a new numbered file.
CREATE OR REPLACE FUNCTION baton_key_rounds(p_agent text, p_key text, p_n integer, p_room boolean)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  taken bigint;
BEGIN
  INSERT INTO flow_keys AS k (agent, flow_key, last_round)
  SELECT a.name, p_key, a.admit_round + p_n - 1
  FROM agents a
  LEFT JOIN LATERAL (SELECT b.queued_in FROM agent_backlog b WHERE p_room AND b.agent = a.name) b ON TRUE
  WHERE a.name = p_agent AND (NOT p_room OR b.queued_in - a.queued_out + p_n <= a.max_backlog)
  ON CONFLICT (agent, flow_key) DO UPDATE SET last_round =
    CASE WHEN k.last_round + p_n > excluded.last_round THEN k.last_round + p_n ELSE excluded.last_round END
  RETURNING k.last_round INTO taken;
  RETURN taken;
END
$$;

ALTER TABLE flow_keys SET (fillfactor = 10);
