import type { StoreKind, Tx } from '../store/adapter.ts';
import { EVENTS_PER_CHUNK, EVENTS_PER_CYCLE, FULL_ROWS_PER_CHUNK, Frontier, readEvents } from './events.ts';
import type { CanaryTiming } from './graces.ts';
import { TouchedRows } from './touched.ts';
import {
  Findings,
  RecentlySeen,
  yieldToLoop,
  type ActivityInvariant,
  type CheckContext,
  type EventRow,
  type OpenViolation,
} from './types.ts';

export interface Checkpoint {
  event_id: number;
  state: string | null;
}

/** What the activity part of a cycle read. */
export interface EventsRead {
  /** The lowest checkpoint the cycle started from (0 in a full check). */
  after: number;
  /** The last event id read. */
  through: number;
  read: number;
  /** The cycle read up to the newest event (false: it stopped at the per-cycle cap). */
  caught_up: boolean;
}

export interface ActivityResult {
  id: string;
  findings: Findings;
  notes: string[];
  checked_at: number;
  /** The checkpoint this invariant started from. */
  from: number;
  /** Where its checkpoint may move now, with the state carried there (not in a full check). */
  next?: Checkpoint;
}

export interface ActivityOptions {
  full: boolean;
  kind: StoreKind;
  now: number;
  timing: CanaryTiming;
  checkpoints: ReadonlyMap<string, Checkpoint>;
  open: ReadonlyMap<string, readonly OpenViolation[]>;
  /** Wall time after which a normal cycle reads no further chunk (EVENTS_READ_BUDGET_MS). */
  readBudgetMs: number;
}

interface Run {
  inv: ActivityInvariant<unknown>;
  ctx: CheckContext;
  notes: string[];
  from: number;
  state: unknown;
  saved?: string | null;
  findings: Findings;
  judged: RecentlySeen;
}

const touched = (events: readonly EventRow[]) => new Set(events.map((e) => e.execution_id));

/**
 * Judge the activity invariants inside the cycle's snapshot. A normal cycle reads the events
 * after the lowest checkpoint in chunks (at most EVENTS_PER_CYCLE), hands each invariant the
 * events after its own checkpoint, judges the executions they touched, then rechecks the
 * subjects of open violations. A full check reads every event from the start, replays carried
 * state from empty and walks every execution by keyset; it moves no checkpoint. Between chunks
 * the event loop gets a turn. Invariants with a `live` part judge their live subjects once per cycle.
 */
export async function judgeActivity(
  tx: Tx,
  invariants: readonly ActivityInvariant<any>[],
  o: ActivityOptions,
): Promise<{ results: ActivityResult[]; events: EventsRead }> {
  const rowsRead = new TouchedRows();
  const runs: Run[] = invariants.map((inv) => {
    const notes: string[] = [];
    const cp = o.full ? undefined : o.checkpoints.get(inv.id);
    const state = inv.state ? (cp?.state ? inv.state.load(cp.state) : inv.state.initial()) : undefined;
    return {
      inv,
      notes,
      from: cp?.event_id ?? 0,
      state,
      findings: new Findings(new Set((o.open.get(inv.id) ?? []).map((v) => v.subject))),
      judged: new RecentlySeen(),
      ctx: { now: o.now, graceMs: inv.grace(o.timing), timing: o.timing, kind: o.kind, note: (t) => notes.push(t), touched: rowsRead },
    };
  });
  for (const r of runs) if (r.inv.state?.prune) await r.inv.state.prune(tx, r.state);

  const judgeRows = async (r: Run, ids: Iterable<string>) => {
    if (!r.inv.rows || (o.full && r.inv.fullWalksRows)) return;
    const fresh = r.judged.fresh(ids);
    if (fresh.length === 0) return;
    r.findings.add(await r.inv.rows(tx, { ids: fresh }, r.ctx));
  };
  const process = async (r: Run, events: readonly EventRow[]) => {
    if (events.length === 0) return;
    const out = r.inv.events?.(events, r.state, r.ctx);
    if (out) r.findings.add(out.findings);
    await judgeRows(r, out?.judge ?? touched(events));
  };

  const start = runs.length ? Math.min(...runs.map((r) => r.from)) : 0;
  const frontier = new Frontier(start, o.now);
  let cursor = start;
  let read = 0;
  let caughtUp = false;
  const readUntil = performance.now() + o.readBudgetMs;
  while (runs.length) {
    const limit = o.full ? EVENTS_PER_CHUNK : Math.min(EVENTS_PER_CHUNK, EVENTS_PER_CYCLE - read);
    if (limit <= 0) break;
    const chunk = await readEvents(tx, cursor, limit);
    read += chunk.length;
    if (chunk.length) cursor = chunk[chunk.length - 1]!.id;
    for (const e of chunk) frontier.feed(e);
    for (const r of runs) {
      const mine = chunk[0] && chunk[0].id > r.from ? chunk : chunk.filter((e) => e.id > r.from);
      if (!r.inv.state) {
        await process(r, mine);
        continue;
      }
      // Carried state is saved exactly at the frontier: the replay up to it is what the next
      // cycle continues from; the events beyond are judged now and replayed again then.
      await process(
        r,
        mine.filter((e) => e.id <= frontier.at),
      );
      if (frontier.blocked && r.saved === undefined) r.saved = r.inv.state.save(r.state);
      await process(
        r,
        mine.filter((e) => e.id > frontier.at),
      );
    }
    if (chunk.length < limit) {
      caughtUp = true;
      break;
    }
    if (!o.full && performance.now() >= readUntil) break;
    await yieldToLoop();
  }

  if (o.full) {
    const walkers = runs.filter((r) => r.inv.rows && r.inv.fullWalksRows);
    let after: string | null = null;
    while (walkers.length) {
      const ids: Array<{ id: string }> = await tx
        .selectFrom('executions')
        .select('id')
        .$if(after !== null, (q) => q.where('id', '>', after!))
        .orderBy('id')
        .limit(FULL_ROWS_PER_CHUNK)
        .execute();
      if (ids.length === 0) break;
      const through: string = ids[ids.length - 1]!.id;
      for (const r of walkers) r.findings.add(await r.inv.rows!(tx, { after, through }, r.ctx));
      after = through;
      if (ids.length < FULL_ROWS_PER_CHUNK) break;
      await yieldToLoop();
    }
  }

  for (const r of runs) if (r.inv.live) r.findings.add(await r.inv.live(tx, r.ctx));

  for (const r of runs) {
    const open = o.open.get(r.inv.id) ?? [];
    if (open.length === 0) continue;
    if (r.inv.recheck) r.findings.add(await r.inv.recheck(tx, open, r.ctx));
    else if (r.inv.rows) r.findings.add(await r.inv.rows(tx, { ids: open.map((v) => v.subject) }, r.ctx));
  }

  const events: EventsRead = { after: start, through: cursor, read, caught_up: caughtUp };
  const results = runs.map((r): ActivityResult => {
    const to = Math.max(r.from, frontier.at);
    const next = o.full ? undefined : { event_id: to, state: r.inv.state ? (r.saved ?? r.inv.state.save(r.state)) : null };
    return { id: r.inv.id, findings: r.findings, notes: r.notes, checked_at: o.now, from: r.from, ...(next ? { next } : {}) };
  });
  return { results, events };
}
