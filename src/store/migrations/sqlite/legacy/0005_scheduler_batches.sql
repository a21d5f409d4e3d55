-- Faster scheduler batches: due schedules are taken in (next_run_at, agent) order, so
-- concurrent batches hold different agents; the index gives that order without a sort.
DROP INDEX schedules_due;
CREATE INDEX schedules_due ON schedules (next_run_at, agent) WHERE enabled = 1 AND next_run_at IS NOT NULL;
