-- The fast paths' facts, kept by the engine (src/engine/fast-path-facts.ts) from the rules written
-- once in TypeScript (src/domain/admission.ts, src/domain/fast-paths.ts): 1 where a claim or a
-- completion may skip the engine's transaction. SQLite never takes a fast path (its transactions
-- are group-committed) but keeps the same columns, so both stores hold the same rows.
-- Never edit a shipped migration: add a new numbered file.
ALTER TABLE agents ADD COLUMN fast_claim INTEGER NOT NULL DEFAULT 0 CHECK (fast_claim IN (0, 1));
ALTER TABLE agents ADD COLUMN fast_complete INTEGER NOT NULL DEFAULT 0 CHECK (fast_complete IN (0, 1));
ALTER TABLE executions ADD COLUMN fast_complete INTEGER NOT NULL DEFAULT 1 CHECK (fast_complete IN (0, 1));

-- The facts of the rows already there, as the rules say today.
UPDATE agents SET
  fast_claim = (paused_at IS NULL AND lapse_hold_at IS NULL AND budget IS NULL
    AND (breaker_config IS NULL OR breaker_state = 'closed')),
  fast_complete = (budget IS NULL
    AND (breaker_config IS NULL OR (breaker_state = 'closed' AND breaker_consecutive = 0
      AND breaker_recent = substr(hex(zeroblob(json_extract(breaker_config, '$.window'))), 1,
        json_extract(breaker_config, '$.window'))))
    AND NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.source_agent = agents.name AND s.enabled = 1));
UPDATE executions SET fast_complete = 0 WHERE group_id IS NOT NULL AND status IN ('queued', 'running');
