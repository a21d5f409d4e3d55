-- Circuit breaker (issue #13): per agent, opens on K consecutive counted failures or when the
-- failure ratio over the last N counted completions reaches a threshold; while open it admits
-- nothing; after a cool-down one probe is admitted (half-open). Decided in the admission
-- transaction on the locked agent row and updated in the completion's transaction, so it is exact
-- across processes. src/domain/breaker.ts holds the rules.
-- Never edit a shipped migration: add a new numbered file.

-- JSON BreakerConfig (src/domain/breaker.ts), or null: the breaker is off. Existing agents stay
-- off (null here); new agents get the documented defaults unless they say otherwise.
ALTER TABLE agents ADD COLUMN breaker_config TEXT;
ALTER TABLE agents ADD COLUMN breaker_state TEXT NOT NULL DEFAULT 'closed' CHECK (breaker_state IN ('closed', 'open', 'half_open'));
-- Counted failures in a row since the last counted success (closed state only).
ALTER TABLE agents ADD COLUMN breaker_consecutive INTEGER NOT NULL DEFAULT 0;
-- The last N counted outcomes, oldest first, one character each ('1' failed, '0' succeeded):
-- the ratio is read from the row, never from a scan of history.
ALTER TABLE agents ADD COLUMN breaker_recent TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN breaker_opened_at BIGINT;
-- Open: no admission before this instant; after it the next admission takes one probe.
ALTER TABLE agents ADD COLUMN breaker_until BIGINT;
-- Half-open: the one execution admitted as the probe (while it runs nothing else is admitted).
ALTER TABLE agents ADD COLUMN breaker_probe_id TEXT;
-- The cool-down of the current opening: the first, doubled on each failed probe, capped.
ALTER TABLE agents ADD COLUMN breaker_cooldown_ms BIGINT;
