-- Turns among a pool's member agents (src/domain/pool-turns.ts, src/engine/pools.ts): per member
-- refused only for lack of one of the pool's seats, since when it has waited and when a claim of
-- it last looked. Read and written by admission under the pool's row lock.
-- Never edit a shipped migration: add a new numbered file.
CREATE TABLE pool_waits (
  pool text NOT NULL REFERENCES pools (name) ON DELETE CASCADE,
  agent text NOT NULL REFERENCES agents (name) ON DELETE CASCADE,
  since bigint NOT NULL,
  seen_at bigint NOT NULL,
  PRIMARY KEY (pool, agent)
);
