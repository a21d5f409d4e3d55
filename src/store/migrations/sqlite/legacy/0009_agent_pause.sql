-- Pause and resume (issue #13): a paused agent admits nothing; its queue keeps filling and its
-- running tasks finish. The admission transaction reads these columns on the agent row it holds
-- locked, so a pause is exact across processes. All three are set together or all null.
-- Never edit a shipped migration: add a new numbered file.
ALTER TABLE agents ADD COLUMN paused_at BIGINT;
ALTER TABLE agents ADD COLUMN paused_by TEXT;
ALTER TABLE agents ADD COLUMN paused_reason TEXT;

-- When a claim for this agent last ran the admission transaction (empty or not), stamped at most
-- every few seconds (CLAIM_STAMP_EVERY_MS): what "no worker has claimed for N seconds" reads.
ALTER TABLE agents ADD COLUMN last_claim_at BIGINT;
