/**
 * The pruner: the one writer allowed to delete history (DESIGN §9). `pruneOnce` removes one
 * batch and says where to go on; a sweep is a run of batches from `startCursor()` until the
 * cursor reaches `done`:
 *
 *   executions — terminal rows whose `completed_at` is older than BATON_RETENTION_DAYS, with
 *                their events, log lines, log head and idempotency keys. A retry chain goes
 *                whole or not at all (every member terminal and old); a chain that holds the
 *                subject of an open canary violation stays. Archived first when a writer is given.
 *   audit      — audit rows older than BATON_AUDIT_RETENTION_DAYS (ids grow with time: the
 *                oldest prefix, stopping at the first younger row).
 *   canary     — resolved violations and delivered/failed alerts older than the execution window,
 *                and groups decided before it. A member or join of a group still running stays.
 *
 * Each batch is one short transaction (`store.pruneTransaction`); candidates are read before it,
 * through indexes made for these shapes (migration 0006: idempotency_keys_execution; 0007:
 * executions_retry_of for the foreign-key check on delete; 0018: executions_completed on
 * (completed_at, id), the cursor's order, so no page sorts).
 */
import { sql, type Kysely, type QueryResult } from 'kysely';
import { isTerminal } from '../domain/states.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { DB } from '../store/schema.ts';
import { readRecords, type ArchiveWriter } from './archive.ts';

export const DAY_MS = 86_400_000;

/**
 * Executions per batch (one transaction), by store. On SQLite a batch runs on the pruner's own
 * connection in a worker thread, so it holds the one writer but not the event loop, and it
 * commits early, after any chunk of DELETE_CHUNK executions (~3-5 ms), when another caller waits
 * for the store (pruneTransaction's `contended`): a batch is as long as nobody needs the store,
 * up to this many (2,000 take ~90 ms at 1M history on the 2-core development machine; fewer,
 * longer transactions write each page of the per-agent indexes, and checkpoint it, fewer times).
 * PostgreSQL does the work in its own process and locks only the rows it deletes, but a batch's
 * statement writes WAL about the size of what it removes (over 1 KiB per execution: the first
 * change to a page after a checkpoint logs all of it), and another transaction's commit waits for the
 * flush of every WAL byte before its own: at 1M, under a submit → claim every ~100 ms, the probe's
 * p99 while sweeping was 31–62 ms in seven runs with batches of 1,000 and 17–23 ms in six of seven
 * with 500 (49.7 in the other; the rate 47–53k/s and 38–43k/s; docs/benchmarks.md, "The prune's
 * tail").
 */
export const PRUNE_BATCH: Readonly<Record<StoreAdapter['kind'], number>> = Object.freeze({ sqlite: 2000, postgres: 500 });

/**
 * Ids per DELETE … IN (…) statement. A SQLite executions batch deletes whole retry chains about
 * this many at a time, so a caller waiting for the store waits for one such chunk at most (~2-3
 * ms at 1M history); the canary phase deletes this many at a time on both stores. (PostgreSQL
 * plans a long IN list as a scan of the whole table — 1,000 ids scanned execution_logs at 100k
 * executions — so its executions batch matches one array instead: deleteExecutionsPostgres.)
 */
const DELETE_CHUNK = 100;
/** Ids per read (SELECT … IN (…)). */
const READ_CHUNK = 500;

export type PrunePhase = 'executions' | 'audit' | 'canary' | 'done';

/** Where a sweep stands. Executions are taken in (completed_at, id) order; alerts in id order. */
export interface PruneCursor {
  phase: PrunePhase;
  completedAt?: number;
  id?: string;
  alertId?: number;
}

export const startCursor = (): PruneCursor => ({ phase: 'executions' });

export interface RetentionWindows {
  /** 0 keeps every execution. */
  retentionDays: number;
  /** 0 keeps every audit row. */
  auditRetentionDays: number;
}

export interface PruneOptions {
  store: StoreAdapter;
  /**
   * The executions batch at `cursor`, already read (a previous batch's `prefetched`): its reads
   * ran while that batch deleted. Must be the selection for this cursor.
   */
  selected?: Promise<ExecutionSelection>;
  settings: RetentionWindows;
  /** Epoch ms the windows count back from. */
  now: number;
  cursor?: PruneCursor;
  /** Append each batch here (fsynced) before deleting it. */
  archive?: ArchiveWriter;
  batchSize?: number;
}

export interface PruneCounts {
  executions: number;
  events: number;
  logs: number;
  keys: number;
  audit: number;
  violations: number;
  alerts: number;
  /** Old terminal executions kept: part of a young or unfinished retry chain, or an open violation's subject. */
  kept: number;
}

export interface PruneBatch extends PruneCounts {
  phase: PrunePhase;
  /**
   * The next executions batch, being read while this one deleted (reads hold neither the writer
   * nor, on SQLite, the event loop: they run on the reader thread). Pass it as `selected` with
   * `next`; a caller that does not may drop it.
   */
  prefetched?: Promise<ExecutionSelection>;
  /** How long the delete transaction held the store (ms). */
  txMs: number;
  /** SQLite: the batch committed early for a caller waiting for the store; its rest is `prefetched`. */
  yielded?: boolean;
  /** How long the reads (and archive write) before it took (ms); they hold neither the writer nor, on SQLite, the event loop. */
  readMs?: number;
  next: PruneCursor;
}

export const zeroCounts = (): PruneCounts => ({ executions: 0, events: 0, logs: 0, keys: 0, audit: 0, violations: 0, alerts: 0, kept: 0 });

export function addCounts(a: PruneCounts, b: PruneCounts): PruneCounts {
  return {
    executions: a.executions + b.executions,
    events: a.events + b.events,
    logs: a.logs + b.logs,
    keys: a.keys + b.keys,
    audit: a.audit + b.audit,
    violations: a.violations + b.violations,
    alerts: a.alerts + b.alerts,
    kept: a.kept + b.kept,
  };
}

/** Remove one batch of the cursor's phase; `next` is where the following call goes on. */
export async function pruneOnce(o: PruneOptions): Promise<PruneBatch> {
  const cursor = o.cursor ?? startCursor();
  switch (cursor.phase) {
    case 'executions':
      return pruneExecutions(o, cursor);
    case 'audit':
      return pruneAudit(o);
    case 'canary':
      return pruneCanary(o, cursor);
    case 'done':
      return { ...zeroCounts(), phase: 'done', txMs: 0, next: cursor };
  }
}

const deleted = (r: { numDeletedRows: bigint } | undefined) => Number(r?.numDeletedRows ?? 0);
const affected = (r: QueryResult<unknown> | undefined) => Number(r?.numAffectedRows ?? 0);

function chunks<T>(xs: readonly T[], n: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += n) out.push(xs.slice(i, i + n));
  return out;
}

/** Subjects of open canary violations: a few rows, read through the open-violations partial index. */
async function openSubjects(db: Kysely<DB>): Promise<Set<string>> {
  const rows = await db.selectFrom('canary_violations').select('subject').where('resolved_at', 'is', null).execute();
  return new Set(rows.map((r) => r.subject));
}

interface Member {
  id: string;
  status: string;
  completed_at: number | null;
  retry_number: number;
  group_id: string | null;
}

/** What one executions batch will delete, read before its transaction. */
export interface ExecutionSelection {
  /** Chosen executions, later retries first (each points at the one before: retry_of). */
  ids: string[];
  /** Every chosen chain's members, by chain key: a chain that gains an open violation meanwhile stays whole. */
  chains: Map<string, Member[]>;
  kept: number;
  next: PruneCursor;
  /** How long the reads (and the archive write) took, ms. */
  readMs: number;
  /** Empty: nothing old is left; `next` leaves the executions phase. */
  done: boolean;
  /**
   * SQLite: the rest of a batch that gave the store up to a waiting caller, and the selection
   * for its `next` that was being read meanwhile (used instead of reading it again).
   */
  after?: Promise<ExecutionSelection>;
}

/**
 * Read the next executions batch after `cursor`: the oldest finished rows (a range of
 * executions_completed), every member of their retry chains, and the open violations' subjects;
 * choose the chains that go whole; archive them when a writer is given (archive, then delete).
 */
export async function selectExecutions(o: PruneOptions, cursor: PruneCursor): Promise<ExecutionSelection> {
  const t0 = performance.now();
  const cutoff = o.now - o.settings.retentionDays * DAY_MS;
  const limit = o.batchSize ?? PRUNE_BATCH[o.store.kind];
  const reader = o.store.reader;
  const empty = (next: PruneCursor, kept = 0): ExecutionSelection => ({
    ids: [],
    chains: new Map(),
    kept,
    next,
    readMs: performance.now() - t0,
    done: next.phase !== 'executions',
  });

  // The oldest finished rows, after the cursor: a range of executions_completed.
  let q = reader
    .selectFrom('executions')
    .select(['id', 'status', 'completed_at', 'retry_root', 'retry_number', 'group_id'])
    .where('completed_at', 'is not', null)
    .where('completed_at', '<', cutoff);
  // No status filter here: on SQLite it would steer the plan to executions_status_recent (every
  // terminal row, then a sort). Only terminal rows carry completed_at; isTerminal() checks below.
  if (cursor.completedAt !== undefined) {
    const c = cursor.completedAt;
    const id = cursor.id ?? '';
    q = q.where('completed_at', '>=', c).where((eb) => eb.or([eb('completed_at', '>', c), eb('id', '>', id)]));
  }
  const rows = await q.orderBy('completed_at').orderBy('id').limit(limit).execute();
  if (rows.length === 0) return empty({ phase: 'audit' });
  const last = rows[rows.length - 1]!;
  const next: PruneCursor =
    rows.length < limit ? { phase: 'audit' } : { phase: 'executions', completedAt: Number(last.completed_at), id: last.id };

  // Retry chains go together: gather every member of each candidate's chain (the first run's id
  // is the chain's key; later runs carry it in retry_root).
  const chains = new Map<string, Member[]>();
  const add = (key: string, m: Member) => {
    const list = chains.get(key);
    if (!list) chains.set(key, [m]);
    else if (!list.some((x) => x.id === m.id)) list.push(m);
  };
  for (const r of rows) add(r.retry_root ?? r.id, r);
  const keys = [...chains.keys()];
  for (const part of chunks(keys, READ_CHUNK)) {
    const members = await reader
      .selectFrom('executions')
      .select(['id', 'status', 'completed_at', 'retry_root', 'retry_number', 'group_id'])
      .where('retry_root', 'in', part)
      .execute();
    for (const m of members) add(m.retry_root!, m);
  }
  const candidateIds = new Set(rows.map((r) => r.id));
  const roots = keys.filter((k) => !candidateIds.has(k));
  for (const part of chunks(roots, READ_CHUNK)) {
    const found = await reader
      .selectFrom('executions')
      .select(['id', 'status', 'completed_at', 'retry_number', 'group_id'])
      .where('id', 'in', part)
      .execute();
    for (const m of found) add(m.id, m);
  }

  const open = await openSubjects(reader);
  // A member (or the join) of a group still running stays: the group's join reads its members'
  // outcomes when it decides. A group never returns to running, so this read cannot go stale.
  const groupIds = [...new Set([...chains.values()].flatMap((ms) => ms.map((m) => m.group_id)).filter((g): g is string => g !== null))];
  const running = new Set<string>();
  for (const part of chunks(groupIds, READ_CHUNK)) {
    const found = await reader
      .selectFrom('execution_groups')
      .select('id')
      .where('id', 'in', part)
      .where('status', '=', 'running')
      .execute();
    for (const g of found) running.add(g.id);
  }
  const old = (m: Member) => isTerminal(m.status) && m.completed_at !== null && Number(m.completed_at) < cutoff;
  const prunable = (members: Member[]) =>
    members.every((m) => old(m) && !open.has(m.id) && !(m.group_id !== null && running.has(m.group_id)));
  const chosen: Member[] = [];
  const chosenChains = new Map<string, Member[]>();
  let kept = 0;
  for (const [key, members] of chains) {
    if (prunable(members)) {
      chosen.push(...members);
      chosenChains.set(key, members);
    } else kept += members.filter((m) => candidateIds.has(m.id)).length;
  }
  // Later retries first: each points at the one before (retry_of), and a statement that deletes a
  // row still referenced by a row left for a later statement would break the foreign key.
  const ids = laterRetriesFirst(chosen);
  if (ids.length === 0) return { ...empty(next, kept), done: false };

  // Archive, then delete: the member is on disk before the rows go.
  if (o.archive) await o.archive.append(await readRecords(reader, ids), o.now);
  return { ids, chains: chosenChains, kept, next, readMs: performance.now() - t0, done: false };
}

async function pruneExecutions(o: PruneOptions, cursor: PruneCursor): Promise<PruneBatch> {
  const base = { ...zeroCounts(), phase: 'executions' as const, txMs: 0 };
  if (o.settings.retentionDays <= 0) return { ...base, next: { phase: 'audit' } };
  const sel = await (o.selected ?? selectExecutions(o, cursor));
  if (sel.done) return { ...base, next: sel.next };
  // The next batch's reads run while this one deletes. Its rows come after this batch's in
  // (completed_at, id) order; a chain reaching into both is deleted by the first, and the second
  // finds its rows gone (deleting nothing; an archive line may be written twice, never lost).
  const prefetched = sel.after ?? (sel.next.phase === 'executions' ? selectExecutions(o, sel.next) : undefined);
  prefetched?.catch(() => undefined); // a caller that drops it must not see an unhandled rejection
  if (sel.ids.length === 0) return { ...base, kept: sel.kept, readMs: sel.readMs, next: sel.next, prefetched };

  const started = performance.now();
  let rest: ExecutionSelection | undefined;
  const counts = await o.store.pruneTransaction(async (tx, contended, inOrder) => {
    // A violation opened since the read keeps its chain (already archived: a duplicate line later).
    const openNow = await openSubjects(tx);
    const chains = [...sel.chains].filter(([, members]) => !members.some((m) => openNow.has(m.id)));
    const c = zeroCounts();
    // PostgreSQL: the whole batch in one statement (deleteExecutionsPostgres), its total counted in it.
    if (o.store.kind === 'postgres')
      return { ...c, ...(await deleteExecutionsPostgres(tx, laterRetriesFirst(chains.flatMap(([, members]) => members)))) };
    // SQLite: whole chains, about DELETE_CHUNK executions at a time; when someone waits for the
    // store, commit what is done and leave the rest to the next batch (the wait is one chunk).
    let i = 0;
    while (i < chains.length) {
      if (i > 0 && contended()) break;
      const part: Member[] = [];
      while (i < chains.length && (part.length === 0 || part.length + chains[i]![1].length <= DELETE_CHUNK)) part.push(...chains[i++]![1]);
      // The ids as one JSON parameter: each statement's text is the same whatever the chunk's size
      // (prepared once on the pruner's thread), and Kysely compiles one value, not hundreds.
      const ids = sql<string>`(SELECT value FROM ${o.store.jsonElements(JSON.stringify(laterRetriesFirst(part)))})`;
      // The chunk's statements go to the pruner's thread together and run there one after another,
      // in this order: one round trip per chunk instead of one per statement. The owned rows go
      // before their execution. Only executions that logged have a head (appendLogs writes it with
      // the first line), and few do: their lines are found through the heads.
      const [logs, , events, keys, , executions] = await inOrder([
        tx
          .deleteFrom('execution_logs')
          .where('execution_id', 'in', (eb) => eb.selectFrom('execution_log_heads').select('execution_id').where('execution_id', 'in', ids))
          .compile(),
        tx.deleteFrom('execution_log_heads').where('execution_id', 'in', ids).compile(),
        tx.deleteFrom('execution_events').where('execution_id', 'in', ids).compile(),
        tx.deleteFrom('idempotency_keys').where('execution_id', 'in', ids).compile(),
        // What a pruned source started (its primary key leads with source_id). A chained task kept
        // longer keeps its caused_by, pointing at a source no longer stored.
        tx.deleteFrom('chain_links').where('source_id', 'in', ids).compile(),
        tx.deleteFrom('executions').where('id', 'in', ids).compile(),
      ]);
      c.logs += affected(logs);
      c.events += affected(events);
      c.keys += affected(keys);
      c.executions += affected(executions);
    }
    if (i < chains.length) {
      const left = chains.slice(i);
      rest = {
        ids: laterRetriesFirst(left.flatMap(([, members]) => members)),
        chains: new Map(left),
        kept: 0,
        next: sel.next,
        readMs: 0,
        done: false,
        after: prefetched,
      };
    }
    await addTotals(tx, c.executions, 0);
    return c;
  });
  return {
    ...base,
    ...counts,
    kept: sel.kept,
    txMs: performance.now() - started,
    readMs: sel.readMs,
    // A batch that gave the store up stays at this cursor: its rest comes next, then `sel.next`.
    next: rest ? cursor : sel.next,
    yielded: rest !== undefined,
    // What a contended batch left is the selection for `next` now; the one read meanwhile waits in it.
    prefetched: rest ? Promise.resolve(rest) : prefetched,
  };
}

/** Later retries first: each points at the one before (retry_of), and a row still referenced cannot go first. */
function laterRetriesFirst(members: readonly Member[]): string[] {
  return [...members].sort((a, b) => Number(b.retry_number) - Number(a.retry_number)).map((m) => m.id);
}

async function pruneAudit(o: PruneOptions): Promise<PruneBatch> {
  const base = { ...zeroCounts(), phase: 'audit' as const, txMs: 0 };
  if (o.settings.auditRetentionDays <= 0) return { ...base, next: { phase: 'canary' } };
  const cutoff = o.now - o.settings.auditRetentionDays * DAY_MS;
  const limit = o.batchSize ?? PRUNE_BATCH[o.store.kind];
  // Audit ids grow with time: the oldest prefix, up to the first row inside the window.
  const rows = await o.store.reader.selectFrom('audit_log').select(['id', 'at']).orderBy('id').limit(limit).execute();
  let upTo: number | undefined;
  let stopped = rows.length < limit;
  for (const r of rows) {
    if (Number(r.at) >= cutoff) {
      stopped = true;
      break;
    }
    upTo = Number(r.id);
  }
  if (upTo === undefined) return { ...base, next: { phase: 'canary' } };
  const started = performance.now();
  const audit = await o.store.pruneTransaction(async (tx) => {
    const n = deleted(await tx.deleteFrom('audit_log').where('id', '<=', upTo!).executeTakeFirst());
    await addTotals(tx, 0, n);
    return n;
  });
  return { ...base, audit, txMs: performance.now() - started, next: stopped ? { phase: 'canary' } : { phase: 'audit' } };
}

async function pruneCanary(o: PruneOptions, cursor: PruneCursor): Promise<PruneBatch> {
  const base = { ...zeroCounts(), phase: 'canary' as const, txMs: 0 };
  if (o.settings.retentionDays <= 0) return { ...base, next: { phase: 'done' } };
  const cutoff = o.now - o.settings.retentionDays * DAY_MS;
  const limit = o.batchSize ?? PRUNE_BATCH[o.store.kind];
  const reader = o.store.reader;
  // Resolved violations: last_seen ≤ resolved_at, so the old ones lie in the canary_violations_recent range.
  const violations = await reader
    .selectFrom('canary_violations')
    .select('id')
    .where('last_seen', '<', cutoff)
    .where('resolved_at', 'is not', null)
    .where('resolved_at', '<', cutoff)
    .orderBy('last_seen', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .execute();
  // Alerts: ids grow with time; take the old prefix, keep pending ones (still being delivered).
  const alertRows = await reader
    .selectFrom('canary_alerts')
    .select(['id', 'status', 'created_at'])
    .where('id', '>', cursor.alertId ?? 0)
    .orderBy('id')
    .limit(limit)
    .execute();
  const alertIds: number[] = [];
  let alertsDone = alertRows.length < limit;
  let alertCursor = cursor.alertId ?? 0;
  for (const a of alertRows) {
    if (Number(a.created_at) >= cutoff) {
      alertsDone = true;
      break;
    }
    alertCursor = Number(a.id);
    if (a.status !== 'pending') alertIds.push(Number(a.id));
  }
  // Groups decided before the window (execution_groups_decided, migration 0016); running ones have no decided_at.
  const groups = await reader
    .selectFrom('execution_groups')
    .select('id')
    .where('decided_at', '<', cutoff)
    .orderBy('decided_at')
    .limit(limit)
    .execute();
  const groupIds = groups.map((g) => g.id);
  const violationIds = violations.map((v) => Number(v.id));
  const done = alertsDone && violations.length < limit && groups.length < limit;
  const next: PruneCursor = done ? { phase: 'done' } : { phase: 'canary', alertId: alertCursor };
  if (violationIds.length === 0 && alertIds.length === 0 && groupIds.length === 0) return { ...base, next };
  const started = performance.now();
  const counts = await o.store.pruneTransaction(async (tx) => {
    const c = zeroCounts();
    for (const part of chunks(violationIds, DELETE_CHUNK))
      c.violations += deleted(
        await tx.deleteFrom('canary_violations').where('id', 'in', part).where('resolved_at', 'is not', null).executeTakeFirst(),
      );
    for (const part of chunks(alertIds, DELETE_CHUNK))
      c.alerts += deleted(await tx.deleteFrom('canary_alerts').where('id', 'in', part).executeTakeFirst());
    for (const part of chunks(groupIds, DELETE_CHUNK))
      await tx.deleteFrom('execution_groups').where('id', 'in', part).where('status', '!=', 'running').execute();
    return c;
  });
  return { ...base, ...counts, txMs: performance.now() - started, next };
}

async function addTotals(tx: Tx, executions: number, audit: number): Promise<void> {
  if (executions === 0 && audit === 0) return;
  await tx
    .updateTable('retention_state')
    .set((eb) => ({ total_executions: eb('total_executions', '+', executions), total_audit: eb('total_audit', '+', audit) }))
    .where('id', '=', 'retention')
    .execute();
}

export interface SweepReport extends PruneCounts {
  started_at: number;
  completed_at: number;
  duration_ms: number;
  batches: number;
  /** The longest single delete transaction (ms). */
  max_tx_ms: number;
  /** All delete transactions together (ms): the store's time the sweep took; the rest of `duration_ms` was the others'. */
  tx_ms?: number;
  /** SQLite, the server's pruner: WAL checkpoint steps run between batches, the longest, and all together (ms). */
  checkpoints?: number;
  max_checkpoint_ms?: number;
  checkpoint_ms?: number;
}

/** Record a finished sweep in retention_state (what doctor, /metrics and the dashboard show). */
export async function recordSweep(store: StoreAdapter, r: SweepReport, error: string | null = null): Promise<void> {
  await store.db
    .updateTable('retention_state')
    .set({
      last_started_at: r.started_at,
      last_completed_at: r.completed_at,
      last_duration_ms: Math.round(r.duration_ms),
      last_executions: r.executions,
      last_audit: r.audit,
      last_error: error,
    })
    .where('id', '=', 'retention')
    .execute();
}

/**
 * Run a whole sweep now (tests, `baton prune`-style callers): batches back to back, with an
 * optional pause between them, then record it. The server uses `Pruner` instead, which paces
 * batches on its loop and holds the leader lease.
 */
export async function pruneAll(o: Omit<PruneOptions, 'cursor'> & { pauseMs?: number; clock?: () => number }): Promise<SweepReport> {
  const clock = o.clock ?? Date.now;
  const startedAt = clock();
  const t0 = performance.now();
  let cursor = startCursor();
  let total = zeroCounts();
  let batches = 0;
  let maxTx = 0;
  let selected: Promise<ExecutionSelection> | undefined;
  while (cursor.phase !== 'done') {
    const b = await pruneOnce({ ...o, cursor, selected });
    selected = b.prefetched;
    total = addCounts(total, b);
    batches++;
    maxTx = Math.max(maxTx, b.txMs);
    cursor = b.next;
    if (o.pauseMs && b.txMs > 0) await new Promise((r) => setTimeout(r, o.pauseMs));
  }
  const report: SweepReport = {
    ...total,
    started_at: startedAt,
    completed_at: clock(),
    duration_ms: performance.now() - t0,
    batches,
    max_tx_ms: maxTx,
  };
  await recordSweep(o.store, report);
  return report;
}

/**
 * PostgreSQL: one executions batch deleted by one statement. Each table's DELETE is a
 * data-modifying CTE over the same id list, so a batch is one round trip and one plan instead of
 * five statements per hundred ids (each with its own parse/bind/execute and the history guard's
 * statement trigger). The foreign keys (events, logs, heads → executions; retry_of) are NO ACTION:
 * checked at the end of the statement, when the rows that referenced a deleted execution are gone
 * with it. The ids are one array value, matched with `= ANY(…)`: an index scan of each table
 * whatever the planner thinks of the array's length (`IN (…)` with a thousand constants made it
 * scan whole tables, and a join with the unnested ids chose sequential scans on a 30,000-row
 * history in test/plans.test.ts). Events, three or more per execution, are found id by id through
 * their index (a LATERAL probe per id; OFFSET 0 keeps the planner from making it a join) and deleted by row address: a batch is a sizeable share of
 * a small events table, where the planner would otherwise scan all of it.
 */
export interface DeletedRows {
  executions: number;
  events: number;
  logs: number;
  keys: number;
}

/** Delete `ids` with their events, log lines and head, idempotency keys and chain links; count them in retention_state. */
export async function deleteExecutionsPostgres(tx: Tx, ids: readonly string[]): Promise<DeletedRows> {
  if (ids.length === 0) return { executions: 0, events: 0, logs: 0, keys: 0 };
  // Only executions that logged have a head (appendLogs writes it with the first line): their
  // lines are deleted by the heads found, not by every id.
  const list = sql`${ids}::text[]`;
  const r = await sql<{ executions: number; events: number; logs: number; keys: number }>`
    WITH heads AS (DELETE FROM execution_log_heads h WHERE h.execution_id = ANY(${list}) RETURNING h.execution_id),
    logs AS (DELETE FROM execution_logs l WHERE l.execution_id = ANY(ARRAY(SELECT execution_id FROM heads)) RETURNING 1),
    events AS (
      DELETE FROM execution_events e WHERE e.ctid = ANY(ARRAY(
        SELECT ev.ctid FROM unnest(${list}) AS i(id) CROSS JOIN LATERAL (SELECT ctid FROM execution_events WHERE execution_id = i.id OFFSET 0) AS ev
      )) RETURNING 1
    ),
    keys AS (DELETE FROM idempotency_keys k WHERE k.execution_id = ANY(${list}) RETURNING 1),
    links AS (DELETE FROM chain_links c WHERE c.source_id = ANY(${list})),
    gone AS (DELETE FROM executions x WHERE x.id = ANY(${list}) RETURNING 1),
    n AS (SELECT count(*)::int AS n FROM gone),
    totals AS (
      UPDATE retention_state SET total_executions = total_executions + n.n FROM n WHERE retention_state.id = 'retention' AND n.n > 0
    )
    SELECT n.n AS executions,
      (SELECT count(*)::int FROM events) AS events,
      (SELECT count(*)::int FROM logs) AS logs,
      (SELECT count(*)::int FROM keys) AS keys
    FROM n`.execute(tx);
  const row = r.rows[0]!;
  return { executions: row.executions, events: row.events, logs: row.logs, keys: row.keys };
}
