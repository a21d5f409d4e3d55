-- The canary's composition checks (C-01): each cycle looks at the running groups and asks which
-- of them still have a live member (queued or running, any retry). A partial index over live
-- rows only, like executions_schedule_open: its size follows the work in flight, never history,
-- and a member leaves it when it ends.
CREATE INDEX executions_group_open ON executions (group_id) WHERE group_id IS NOT NULL AND status IN ('queued', 'running');
