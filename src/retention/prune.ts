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
 * Each batch is one short transaction (`store.pruneTransaction`; the executions themselves go by
 * `store.deleteExecutionChains`); candidates are read before it (prune-select.ts), through
 * indexes made for these shapes (idempotency_keys_execution; executions_retry_of for the
 * foreign-key check on delete; executions_completed on (completed_at, id), the cursor's order, so
 * no page sorts).
 */
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import { laterRetriesFirst, PRUNE_DELETE_CHUNK } from '../store/prune-deletes.ts';
import {
  chunks,
  DAY_MS,
  openSubjects,
  selectExecutions,
  startCursor,
  type ExecutionSelection,
  type PruneCursor,
  type PrunePhase,
  type SelectOptions,
} from './prune-select.ts';

export {
  DAY_MS,
  selectExecutions,
  startCursor,
  type ExecutionSelection,
  type PruneCursor,
  type PrunePhase,
  type RetentionWindows,
} from './prune-select.ts';

export interface PruneOptions extends SelectOptions {
  /**
   * The executions batch at `cursor`, already read (a previous batch's `prefetched`): its reads
   * ran while that batch deleted. Must be the selection for this cursor.
   */
  selected?: Promise<ExecutionSelection>;
  cursor?: PruneCursor;
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
    // Whole chains; on SQLite, when someone waits for the store, the store stops between two
    // chunks and the rest goes to the next batch (the wait is one chunk).
    const { chains: gone, ...rows } = await o.store.deleteExecutionChains(
      tx,
      chains.map(([, members]) => members),
      contended,
      inOrder,
    );
    if (gone < chains.length) {
      const left = chains.slice(gone);
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
    return { ...zeroCounts(), ...rows };
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

async function pruneAudit(o: PruneOptions): Promise<PruneBatch> {
  const base = { ...zeroCounts(), phase: 'audit' as const, txMs: 0 };
  if (o.settings.auditRetentionDays <= 0) return { ...base, next: { phase: 'canary' } };
  const cutoff = o.now - o.settings.auditRetentionDays * DAY_MS;
  const limit = o.batchSize ?? o.store.pruneBatch;
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
  const limit = o.batchSize ?? o.store.pruneBatch;
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
  // Groups decided before the window (execution_groups_decided); running ones have no decided_at.
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
    for (const part of chunks(violationIds, PRUNE_DELETE_CHUNK))
      c.violations += deleted(
        await tx.deleteFrom('canary_violations').where('id', 'in', part).where('resolved_at', 'is not', null).executeTakeFirst(),
      );
    for (const part of chunks(alertIds, PRUNE_DELETE_CHUNK))
      c.alerts += deleted(await tx.deleteFrom('canary_alerts').where('id', 'in', part).executeTakeFirst());
    for (const part of chunks(groupIds, PRUNE_DELETE_CHUNK))
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
  const clock = o.clock ?? (() => o.store.now());
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
