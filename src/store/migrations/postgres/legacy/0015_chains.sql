-- Chains (issue #14): an agent's subscriptions as source, enabled or not — what listing them
-- (GET /v1/subscriptions?agent=) and deleting them with the agent read. subscriptions_source
-- (0014) covers only enabled rows: the completing transaction's read.
CREATE INDEX subscriptions_by_source ON subscriptions (source_agent);
