import { CompiledQuery, sql, type KyselyPlugin } from 'kysely';
import { newExecutionId } from '../../src/domain/ids.ts';
import type { StoreAdapter, Tx } from '../../src/store/adapter.ts';
import type { ExecutionRow, NewExecution } from '../../src/store/schema.ts';

/**
 * Write an execution row exactly as given, bypassing the engine: this is how canary tests put a
 * violating state into the database (the event trigger still records its creation).
 */
export async function writeRow(store: StoreAdapter, now: number, row: Partial<NewExecution> & { agent: string }): Promise<ExecutionRow> {
  const values: NewExecution = {
    id: newExecutionId(),
    trigger_kind: 'api',
    origin: '{}',
    message: 'canary test',
    payload: 'null',
    priority: 0,
    status: 'queued',
    attempt: 0,
    max_redeliveries: 3,
    timeout_seconds: 900,
    lease_ttl_seconds: 30,
    created_at: now,
    queued_at: now,
    changed_at: now,
    changed_by: 'test',
    ...row,
  };
  return store.db.insertInto('executions').values(values).returningAll().executeTakeFirstOrThrow();
}

/** A running row with a live lease, as admission would leave it. */
export function runningRow(now: number, agent: string, extra: Partial<NewExecution> = {}): Partial<NewExecution> & { agent: string } {
  return {
    agent,
    status: 'running',
    attempt: 1,
    lease_owner: 'worker:test',
    lease_token: 'ls_test_' + Math.random().toString(36).slice(2),
    lease_expires_at: now + 30_000,
    heartbeat_at: now,
    started_at: now,
    deadline_at: now + 900_000,
    ...extra,
  };
}

/**
 * Run `fn` with the running_has_lease CHECK out of the way, to write a state the database
 * normally refuses (PostgreSQL: drop and re-add the constraint; SQLite: ignore_check_constraints).
 * `fn` must leave no violating row behind when it returns, or re-adding the constraint fails.
 */
export async function withoutLeaseCheck(store: StoreAdapter, fn: () => Promise<void>): Promise<void> {
  if (store.kind === 'postgres') {
    await sql`ALTER TABLE executions DROP CONSTRAINT running_has_lease`.execute(store.db);
    try {
      await fn();
    } finally {
      await sql`ALTER TABLE executions ADD CONSTRAINT running_has_lease CHECK (status <> 'running' OR (lease_token IS NOT NULL AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))`.execute(
        store.db,
      );
    }
  } else {
    await sql`PRAGMA ignore_check_constraints = ON`.execute(store.db);
    try {
      await fn();
    } finally {
      await sql`PRAGMA ignore_check_constraints = OFF`.execute(store.db);
    }
  }
}

/** Hide a table for a moment (a real failing read for H-01, a missing table for E-06). */
export async function withTableRenamed(store: StoreAdapter, table: string, fn: () => Promise<void>): Promise<void> {
  await sql`ALTER TABLE ${sql.table(table)} RENAME TO ${sql.table(table + '_hidden')}`.execute(store.db);
  try {
    await fn();
  } finally {
    await sql`ALTER TABLE ${sql.table(table + '_hidden')} RENAME TO ${sql.table(table)}`.execute(store.db);
  }
}

/**
 * A store whose snapshots count the rows their queries return and keep the queries (compiled,
 * with parameters), so a test can see what a canary cycle reads and EXPLAIN each query.
 */
export function observed(store: StoreAdapter) {
  const queries: CompiledQuery[] = [];
  let rows = 0;
  const plugin: KyselyPlugin = {
    transformQuery(args) {
      queries.push(store.db.getExecutor().compileQuery(args.node, args.queryId));
      return args.node;
    },
    async transformResult(args) {
      rows += args.result.rows.length;
      return args.result;
    },
  };
  const wrapped: StoreAdapter = { ...store, snapshot: (fn) => store.snapshot((tx) => fn(tx.withPlugin(plugin) as Tx)) };
  return {
    store: wrapped,
    queries,
    get rows() {
      return rows;
    },
    reset() {
      rows = 0;
      queries.length = 0;
    },
  };
}

/** Tables whose size is history: a query may only seek them through an index. */
const HISTORY_TABLES = ['executions', 'execution_events', 'execution_logs', 'audit_log', 'execution_groups', 'chain_links'];
/** Partial indexes over non-terminal rows (and open violations): walking one is bounded by the live fleet, not history. */
const LIVE_INDEXES = [
  'canary_violations_open',
  'executions_admission',
  'executions_running',
  'executions_schedule_open',
  'executions_webhook_open',
  'executions_serial_running',
  'executions_group_open',
  'execution_groups_open',
];

/**
 * The plan of each query, and why it walks history (undefined: every history table is reached
 * through an index seek, or a walk of a partial index over live rows). PostgreSQL plans with
 * sequential scans disabled, so a Seq Scan left in the plan means no index fits the shape;
 * an index scan without an index condition is a walk too.
 */
export async function historyWalks(store: StoreAdapter, queries: CompiledQuery[]): Promise<Array<{ sql: string; walk: string }>> {
  const out: Array<{ sql: string; walk: string }> = [];
  if (store.kind === 'sqlite') {
    for (const q of queries) {
      const plan = await store.db.executeQuery<{ detail: string }>(CompiledQuery.raw(`EXPLAIN QUERY PLAN ${q.sql}`, [...q.parameters]));
      for (const { detail } of plan.rows) {
        const m = /^SCAN (\w+)(?: AS \w+)?(?: USING (?:COVERING )?INDEX (\w+))?/.exec(detail);
        if (m && HISTORY_TABLES.includes(m[1]!) && !(m[2] && LIVE_INDEXES.includes(m[2]))) out.push({ sql: q.sql, walk: detail });
      }
    }
    return out;
  }
  await store.transaction(async (tx) => {
    await sql`SET LOCAL enable_seqscan = off`.execute(tx);
    for (const q of queries) {
      const res = await tx.executeQuery<{ 'QUERY PLAN': any }>(CompiledQuery.raw(`EXPLAIN (FORMAT JSON) ${q.sql}`, [...q.parameters]));
      // A Bitmap Index Scan names no relation: its Bitmap Heap Scan parent does (`parent`).
      const visit = (node: any, parent?: string) => {
        const rel = node['Relation Name'];
        if (rel && HISTORY_TABLES.includes(rel)) {
          const type = node['Node Type'];
          if (type === 'Seq Scan') out.push({ sql: q.sql, walk: `Seq Scan on ${rel}` });
          if ((type === 'Index Scan' || type === 'Index Only Scan') && !node['Index Cond'] && !LIVE_INDEXES.includes(node['Index Name']))
            out.push({ sql: q.sql, walk: `${type} using ${node['Index Name']} on ${rel} without an index condition` });
        }
        if (
          node['Node Type'] === 'Bitmap Index Scan' &&
          parent !== undefined &&
          HISTORY_TABLES.includes(parent) &&
          !node['Index Cond'] &&
          !LIVE_INDEXES.includes(node['Index Name'])
        )
          out.push({ sql: q.sql, walk: `Bitmap Index Scan using ${node['Index Name']} without an index condition` });
        for (const child of node.Plans ?? []) visit(child, rel ?? parent);
      };
      visit(res.rows[0]!['QUERY PLAN'][0].Plan);
    }
  });
  return out;
}
