/**
 * The reads before an executions batch of the pruner (prune.ts): which finished executions are
 * old enough, with whole retry chains, minus those an open canary violation or a running group
 * still needs. They run through `store.reader`, outside the batch's transaction.
 */
import type { Kysely } from 'kysely';
import { isTerminal } from '../domain/states.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import { laterRetriesFirst } from '../store/prune-deletes.ts';
import type { DB } from '../store/schema.ts';
import { readRecords, type ArchiveWriter } from './archive.ts';

export const DAY_MS = 86_400_000;

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

/** What a selection reads with (PruneOptions, less where the sweep stands). */
export interface SelectOptions {
  store: StoreAdapter;
  settings: RetentionWindows;
  /** Epoch ms the windows count back from. */
  now: number;
  /** Append each batch here (fsynced) before deleting it. */
  archive?: ArchiveWriter;
  /** Default: the store's pruneBatch. */
  batchSize?: number;
}

export function chunks<T>(xs: readonly T[], n: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += n) out.push(xs.slice(i, i + n));
  return out;
}

/** Subjects of open canary violations: a few rows, read through the open-violations partial index. */
export async function openSubjects(db: Kysely<DB>): Promise<Set<string>> {
  const rows = await db.selectFrom('canary_violations').select('subject').where('resolved_at', 'is', null).execute();
  return new Set(rows.map((r) => r.subject));
}

export interface Member {
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
export async function selectExecutions(o: SelectOptions, cursor: PruneCursor): Promise<ExecutionSelection> {
  const t0 = performance.now();
  const cutoff = o.now - o.settings.retentionDays * DAY_MS;
  const limit = o.batchSize ?? o.store.pruneBatch;
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
