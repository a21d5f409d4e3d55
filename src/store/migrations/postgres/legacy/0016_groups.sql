-- Groups (issue #14, fan-out with a join). Never edit a shipped migration: add a new numbered file.

-- The pruner removes groups decided before the retention window, oldest first: a range of
-- decided_at over decided groups only (a running group has none and is never pruned).
CREATE INDEX execution_groups_decided ON execution_groups (decided_at) WHERE decided_at IS NOT NULL;
