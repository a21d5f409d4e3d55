-- Lists of webhooks and subscriptions page through an index made for their order (issue #10,
-- "Bounded answers"): webhooks by (agent, name, id), subscriptions oldest first by (created_at,
-- id), alone or after the source, the target, or both. Each new index starts with the columns of
-- the one it replaces, so every lookup that used the old one seeks the new one. Never edit a
-- shipped migration: add a new numbered file.
DROP INDEX webhooks_agent;
CREATE INDEX webhooks_agent_name ON webhooks (agent, name, id);
DROP INDEX subscriptions_by_source;
CREATE INDEX subscriptions_source_created ON subscriptions (source_agent, created_at, id);
DROP INDEX subscriptions_target;
CREATE INDEX subscriptions_target_created ON subscriptions (target_agent, created_at, id);
CREATE INDEX subscriptions_pair_created ON subscriptions (source_agent, target_agent, created_at, id);
CREATE INDEX subscriptions_created ON subscriptions (created_at, id);
