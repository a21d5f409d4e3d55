import { sql, type ExpressionBuilder, type Kysely } from 'kysely';
import { ADMISSION_ORDER } from '../domain/flow.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { LockedCandidate } from '../store/fast-paths.ts';
import { perStore, preparedQuery } from '../store/prepared-query.ts';
import type { DB } from '../store/schema.ts';
import { QUEUED, RUNNING } from './transitions/stamp.ts';

/**
 * The queued rows an admission may take, in admission order (ADMISSION_ORDER in
 * src/domain/flow.ts: priority, fair_round, queued_at, id), skipping rows whose run_after lies
 * ahead, rows whose serial key runs, and rows of shut keys (full or throttled).
 *
 * An agent's queue is walked in that order through executions_admission. Shut keys are left out
 * after the walk, never by it: a shut key's backlog can lead the queue (a key that floods takes a
 * round per task), and a walk that filters it out reads all of it to find what else is queued. So
 * a keyed claim with shut keys walks a bounded prefix of the queue (walkRows); when that prefix
 * holds fewer candidates than asked and the queue goes on, it seeks the head of each other
 * queued key (executions_key_admission) and of the tasks without a key at each priority
 * (executions_admission: their round is 0), and merges them. Either way the candidates are the
 * same rows a walk would find; the cost follows the bounded prefix and the number of queued
 * keys, never the depth of a shut key's backlog (test/cost/flow-plans.test.ts counts the rows read).
 */

/** What admission reads of a candidate (one shape wherever it is read: the store's fast path too). */
export type Candidate = LockedCandidate;
type Ordered = Candidate & { priority: number; queued_at: number | null };

const CANDIDATE_COLUMNS = ['id', 'lease_ttl_seconds', 'timeout_seconds', 'serial_key', 'flow_key', 'fair_round'] as const;

/** Due (run_after reached) and not behind its running serial key: what every candidate read filters. */
function mayStart(eb: ExpressionBuilder<DB, 'executions'>, now: number) {
  return eb.and([
    eb.or([eb('run_after', 'is', null), eb('run_after', '<=', now)]),
    // A serial key (schedule overlap policy 'queue') waits while a row with the same key runs.
    // `SELECT 1`: the partial index executions_serial_running then covers the check, and
    // SQLite picks it even on a store never analysed (with `k.id` it walked every running
    // row through executions_status_recent instead).
    eb.or([
      eb('serial_key', 'is', null),
      eb.not(
        eb.exists(
          eb
            .selectFrom('executions as k')
            .select(sql.lit(1).as('one'))
            .whereRef('k.serial_key', '=', 'executions.serial_key')
            .where('k.status', '=', RUNNING),
        ),
      ),
    ]),
  ]);
}

/** The agent's queued rows that may start, in admission order, at most `limit` (the shape: SQLite writes it in the text). */
const walk = (db: Tx, p: { agent: string; now: number }, limit: number) =>
  db
    .selectFrom('executions')
    .select(CANDIDATE_COLUMNS)
    .select(sql<number>`octet_length(message) + octet_length(payload)`.as('bytes'))
    .where('agent', '=', p.agent)
    .where('status', '=', QUEUED)
    .where((eb) => mayStart(eb, p.now))
    .orderBy('priority')
    .orderBy('fair_round')
    .orderBy('queued_at')
    .orderBy('id')
    .limit(limit);

/** The walk, taking the rows (skipping those another transaction holds): one per store (row locks differ), built once per limit. */
export const candidatesFor = perStore((store) =>
  preparedQuery((db: Tx, p: { agent: string; now: number }, limit: number) => store.lockRows(walk(db, p, limit), 'skip')),
);

/** The walk without taking the rows, built once per limit: a keyed claim with shut keys reads this prefix. */
const prefixOf = preparedQuery((db: Tx, p: { agent: string; now: number }, limit: number) => walk(db, p, limit));

/**
 * How many queued rows a keyed claim with shut keys reads in admission order before it seeks key
 * heads instead: room for the candidates it wants and for shut keys' rows between them.
 */
export const walkRows = (limit: number) => 64 + 4 * limit;

/** Key heads merged per statement (a UNION ALL of this many ordered seeks). */
const HEADS_PER_STATEMENT = 32;

/**
 * The first `limit` candidates of `agent` outside the `shut` keys, taken (PostgreSQL: locked,
 * skipping rows another transaction holds; see take). See the top of this file.
 */
export async function keyedCandidates(
  store: StoreAdapter,
  tx: Tx,
  p: { agent: string; now: number },
  limit: number,
  shut: readonly string[],
): Promise<Candidate[]> {
  if (shut.length === 0) return candidatesFor(store)(tx, p, limit);
  const closed = new Set(shut);
  const open = (c: Candidate) => c.flow_key === null || !closed.has(c.flow_key);
  const prefixRows = walkRows(limit);
  const found = await inIndexOrder(store, tx, async () => {
    const prefix = await prefixOf(tx, p, prefixRows);
    const kept = prefix.filter(open).slice(0, limit);
    // Unless the prefix held enough or was the whole queue, the first candidates lie past it.
    return kept.length < limit && prefix.length === prefixRows ? fromHeads(tx, p, limit, closed) : kept;
  });
  return take(store, tx, found, p.now);
}

/**
 * Run `reads` with no sorting plan left to PostgreSQL (enable_sort and enable_incremental_sort
 * off, then set back), so that each ordered read walks the index that delivers its order
 * (executions_admission, executions_key_admission) whatever the statistics say. With statistics of
 * before a backlog grew (autovacuum analyses executions after a tenth of it changed) PostgreSQL
 * estimates one queued row and would read every queued row through executions_status_recent, led
 * by status, or through executions_key_queued, and sort them (test/cost/flow-plans-stale.test.ts).
 * baton_claim_many runs with enable_sort
 * off for the same reason. The settings are set with their transaction's scope (set_config(…, true)).
 */
export async function inIndexOrder<T>(store: Pick<StoreAdapter, 'kind'>, tx: Kysely<DB>, reads: () => Promise<T>): Promise<T> {
  if (store.kind !== 'postgres') return reads();
  const { rows } = await sql<{ sort: string; incremental: string }>`SELECT current_setting('enable_sort') AS sort,
    current_setting('enable_incremental_sort') AS incremental, ${NO_SORT}`.execute(tx);
  const out = await reads();
  const was = rows[0]!;
  await sql`SELECT set_config('enable_sort', ${was.sort}, true), set_config('enable_incremental_sort', ${was.incremental}, true)`.execute(
    tx,
  );
  return out;
}
/** The settings inIndexOrder reads under (test/cost/plans-check.ts and bench/flow-backlog-plans.ts replay them). */
export const NO_SORT = sql.raw(`set_config('enable_sort', 'off', true), set_config('enable_incremental_sort', 'off', true)`);

/**
 * executions_key_admission's order: the keys are stepped through in it, so that no plan takes
 * executions_key_queued, smaller (its entries deduplicate) but led by status, which PostgreSQL then
 * reads from its first page for any agent (the migration that made executions_key_admission says why).
 */
const KEY_ORDER = sql.raw('flow_key, priority, fair_round, queued_at, id');

/** The agent's queued keys and the priorities it has queued tasks at: one seek each (a loose index scan). */
async function queuedGroups(tx: Tx, agent: string): Promise<{ keys: string[]; priorities: number[] }> {
  const { rows } = await sql<{ flow_key: string | null; priority: number | null }>`
    WITH RECURSIVE keys(k) AS (
      SELECT (SELECT flow_key FROM executions
        WHERE agent = ${agent} AND status = ${QUEUED} AND flow_key IS NOT NULL ORDER BY ${KEY_ORDER} LIMIT 1)
      UNION ALL
      SELECT (SELECT flow_key FROM executions
        WHERE agent = ${agent} AND status = ${QUEUED} AND flow_key > keys.k ORDER BY ${KEY_ORDER} LIMIT 1)
      FROM keys WHERE keys.k IS NOT NULL
    ), priorities(p) AS (
      SELECT (SELECT priority FROM executions WHERE agent = ${agent} AND status = ${QUEUED} ORDER BY priority LIMIT 1)
      UNION ALL
      SELECT (SELECT priority FROM executions
        WHERE agent = ${agent} AND status = ${QUEUED} AND priority > priorities.p ORDER BY priority LIMIT 1)
      FROM priorities WHERE priorities.p IS NOT NULL
    )
    SELECT k AS flow_key, NULL AS priority FROM keys WHERE k IS NOT NULL
    UNION ALL
    SELECT NULL, p FROM priorities WHERE p IS NOT NULL`.execute(tx);
  const keys: string[] = [];
  const priorities: number[] = [];
  for (const r of rows) {
    if (r.flow_key !== null) keys.push(r.flow_key);
    else if (r.priority !== null) priorities.push(Number(r.priority));
  }
  return { keys, priorities };
}

/**
 * The first `limit` candidates, merged from the heads of the agent's queued keys that are not
 * shut (executions_key_admission: agent, key, then admission order) and, at each priority with
 * queued tasks, of the tasks without a key (their round is 0: src/domain/flow.ts), through
 * executions_admission. Each head is at most `limit` rows: the merge never needs more of one.
 */
async function fromHeads(tx: Tx, p: { agent: string; now: number }, limit: number, shut: ReadonlySet<string>): Promise<Candidate[]> {
  const { keys, priorities } = await queuedGroups(tx, p.agent);
  type Head = ReturnType<typeof ordered>;
  const head = (where: (q: Head) => Head): Head => where(ordered(tx, p, limit));
  const heads: Head[] = [
    ...keys.filter((k) => !shut.has(k)).map((k) => head((q) => q.where('flow_key', '=', k))),
    ...priorities.map((n) => head((q) => q.where('priority', '=', n).where('fair_round', '=', 0).where('flow_key', 'is', null))),
  ];
  let merged: Ordered[] = [];
  for (let i = 0; i < heads.length; i += HEADS_PER_STATEMENT) {
    const part = heads.slice(i, i + HEADS_PER_STATEMENT);
    const arm = (q: Head, j: number) => tx.selectFrom(q.as(`h${j}`)).selectAll();
    let union = arm(part[0]!, 0);
    part.slice(1).forEach((q, j) => (union = union.unionAll(arm(q, j + 1))));
    const rows = await union.orderBy('priority').orderBy('fair_round').orderBy('queued_at').orderBy('id').limit(limit).execute();
    merged = [...merged, ...rows].sort(admissionOrder).slice(0, limit);
  }
  return merged;
}

/** One head: the queued rows of `agent` that may start, with their order's columns, in admission order. */
const ordered = (tx: Tx, p: { agent: string; now: number }, limit: number) => walk(tx, p, limit).select(['priority', 'queued_at']);

function admissionOrder(x: Ordered, y: Ordered): number {
  for (const c of ADMISSION_ORDER) {
    const a = c === 'id' ? x.id : Number(x[c]);
    const b = c === 'id' ? y.id : Number(y[c]);
    if (a !== b) return a < b ? -1 : 1;
  }
  return 0;
}

/**
 * Take the candidates found without locks: lock each (PostgreSQL: FOR NO KEY UPDATE SKIP LOCKED,
 * by primary key) and keep those still queued and due, in the order found: the locked read
 * returns each row's latest version, so a task cancelled or debounced again (its start moved on)
 * since it was read is not taken. A row another transaction holds (a cancel in flight) is left to
 * the next claim, as the walk that takes rows skips it. The checks are made here rather than in
 * the statement, whose only condition is the primary key: no plan can walk a backlog for it.
 */
async function take(store: StoreAdapter, tx: Tx, found: Candidate[], now: number): Promise<Candidate[]> {
  if (found.length === 0) return [];
  const held = await store
    .lockRows(
      tx
        .selectFrom('executions')
        .select(['id', 'status', 'run_after'])
        .where(
          'id',
          'in',
          found.map((c) => c.id),
        ),
      'skip',
    )
    .execute();
  const queued = new Set(
    held.filter((r) => r.status === 'queued' && (r.run_after === null || Number(r.run_after) <= now)).map((r) => r.id),
  );
  return found.filter((c) => queued.has(c.id));
}
