-- Composition (issue #14): chains (one agent's outcome starts another's task) and groups
-- (fan-out with a join). Never edit a shipped migration: add a new numbered file.

-- Two new trigger kinds: 'chain' (started by a subscription) and 'group' (a group's member or
-- its join). NOT VALID: every existing row satisfied the narrower check, so none is re-read.
ALTER TABLE executions DROP CONSTRAINT executions_trigger_kind_check;
ALTER TABLE executions ADD CONSTRAINT executions_trigger_kind_check
  CHECK (trigger_kind IN ('schedule', 'manual', 'webhook', 'api', 'mcp', 'cli', 'retry', 'chain', 'group')) NOT VALID;

-- Chains: when an execution of `source_agent` reaches its final state with a matching status
-- (and, optionally, schedule or trigger kind), start a task on `target_agent`. `message` and
-- `payload` are templates over the source (src/domain/templates.ts).
CREATE TABLE subscriptions (
  id            TEXT PRIMARY KEY,
  source_agent  TEXT NOT NULL,
  target_agent  TEXT NOT NULL,
  on_status     TEXT NOT NULL CHECK (on_status IN ('succeeded', 'failed', 'cancelled', 'any')),
  schedule_id   TEXT,
  trigger_kind  TEXT,
  message       TEXT NOT NULL,
  -- JSON template, or NULL: the task's payload is a summary of the source.
  payload       TEXT,
  enabled       INTEGER NOT NULL CHECK (enabled IN (0, 1)),
  created_at    BIGINT NOT NULL,
  created_by    TEXT NOT NULL,
  updated_at    BIGINT NOT NULL
);
-- What the completing transaction reads: the enabled subscriptions of the source's agent.
CREATE INDEX subscriptions_source ON subscriptions (source_agent) WHERE enabled = 1;
CREATE INDEX subscriptions_target ON subscriptions (target_agent);

-- One row per (source execution, subscription) that matched: what it started, or why it
-- started nothing (`refused`: depth_limit | backlog_full | agent_missing). The primary key makes
-- a link exactly-once; it is the "event on the source" the source's view lists.
CREATE TABLE chain_links (
  source_id        TEXT NOT NULL,
  subscription_id  TEXT NOT NULL,
  execution_id     TEXT,
  refused          TEXT,
  at               BIGINT NOT NULL,
  PRIMARY KEY (source_id, subscription_id),
  CHECK ((execution_id IS NULL) <> (refused IS NULL))
);
CREATE INDEX chain_links_at ON chain_links (at);

-- Fan-out with a join: `size` member executions created with the group in one transaction;
-- when the policy decides (every member final, the first failure, the first success, a quorum),
-- `status` leaves 'running' by compare-and-set and the join task (if any) is created with it.
CREATE TABLE execution_groups (
  id                 TEXT PRIMARY KEY,
  policy             TEXT NOT NULL CHECK (policy IN ('all', 'all_succeeded', 'first_succeeded', 'quorum')),
  quorum             INTEGER,
  size               INTEGER NOT NULL CHECK (size > 0),
  status             TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
  -- Members in their final state, and how many of those succeeded / failed.
  finished           INTEGER NOT NULL,
  succeeded          INTEGER NOT NULL,
  failed             INTEGER NOT NULL,
  -- JSON {agent, message, payload?} of the join task, or NULL for none.
  join_spec          TEXT,
  join_execution_id  TEXT,
  -- Why a join spec produced no join task (backlog_full, agent_missing, cancelled).
  join_refused       TEXT,
  idempotency_key    TEXT,
  created_at         BIGINT NOT NULL,
  created_by         TEXT NOT NULL,
  decided_at         BIGINT,
  CONSTRAINT execution_groups_quorum CHECK ((policy = 'quorum') = (quorum IS NOT NULL))
);
CREATE INDEX execution_groups_recent ON execution_groups (created_at DESC, id DESC);
CREATE INDEX execution_groups_open ON execution_groups (created_at) WHERE status = 'running';

-- Where an execution came from when composition created it: the source execution and the
-- subscription (a chained task; `chain_depth` is the source's depth + 1, 0 otherwise), or the
-- group and the member's position in it (the join has the group and no index). Retries of a
-- member keep its group and index: the member's final outcome is its last retry's.
ALTER TABLE executions ADD COLUMN caused_by TEXT;
ALTER TABLE executions ADD COLUMN subscription_id TEXT;
ALTER TABLE executions ADD COLUMN chain_depth INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN group_id TEXT;
ALTER TABLE executions ADD COLUMN group_index INTEGER;
CREATE INDEX executions_caused_by ON executions (caused_by) WHERE caused_by IS NOT NULL;
CREATE INDEX executions_group ON executions (group_id, group_index) WHERE group_id IS NOT NULL;
