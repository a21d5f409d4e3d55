-- Shared-cause lapses (issue #13): when two or more of one agent's leases lapse in the same
-- reaper transaction, its workers died together (a crash, a network split); that is not the
-- tasks' fault. The reaper re-queues them without charging the attempt and holds the agent's
-- admission until a worker of it is seen again (src/domain/admission.ts, `lapse_hold`).
-- Both set together, or both null when nothing is held.
-- Never edit a shipped migration: add a new numbered file.
ALTER TABLE agents ADD COLUMN lapse_hold_at BIGINT;
ALTER TABLE agents ADD COLUMN lapse_hold_count INTEGER;

-- How many lapses of this execution were forgiven as shared-cause. Capped (MAX_FORGIVEN_LAPSES),
-- so a set of tasks that each crash their worker cannot dodge poison forever by dying together.
ALTER TABLE executions ADD COLUMN lapses_forgiven INTEGER NOT NULL DEFAULT 0;
