import type { StoreAdapter, StoreKind, Tx } from '../store/adapter.ts';
import { judgeActivity, type Checkpoint, type EventsRead } from './activity.ts';
import type { AlertSink } from './alerts.ts';
import { CATALOGUE, H01, isActivity, isState } from './catalogue.ts';
import { H01_CHECKPOINT, judgeH01, readEvidence, type Evidence } from './evidence.ts';
import { DEFAULT_TIMING, type CanaryTiming } from './graces.ts';
import { record, type CheckpointMove, type Recorded } from './record.ts';
import {
  Findings,
  yieldToLoop,
  type CheckContext,
  type CheckResult,
  type Finding,
  type Invariant,
  type OpenViolation,
  type SliceCursor,
  type StateInvariant,
} from './types.ts';

export interface CanaryRunOptions {
  store: StoreAdapter;
  /** Milliseconds since the epoch; each check reads it for itself. Default the store's clock (StoreAdapter.now). */
  clock?: () => number;
  /** The watched components' timing; graces derive from it. Default: src/config.ts. */
  timing?: Partial<CanaryTiming>;
  /** Alert sinks to queue transitions for. Default none. */
  sinks?: AlertSink[];
  /** Default: the whole catalogue. */
  invariants?: readonly Invariant[];
  /** Judge all history (in bounded chunks) instead of the activity since the checkpoints. Default false. */
  full?: boolean;
  /** Wall time after which a cycle reads no further chunk of events. Default none; the canary's own cycles (Canary) use EVENTS_READ_BUDGET_MS. */
  readBudgetMs?: number;
  /** Rows a state invariant that reads its population in slices (E-04) reads a cycle. Default SLICE_ROWS. */
  sliceRows?: number;
}

/**
 * Queued rows E-04 reads a cycle: a cycle's read stays bounded however deep the backlog, and each
 * queued row is read within ceil(queued / SLICE_ROWS) + 1 cycles.
 */
export const SLICE_ROWS = 10_000;

/**
 * Where each sliced state invariant stopped, per store, in this process: a restarted process
 * starts its laps over, which reads some rows sooner and skips none.
 */
const places = new WeakMap<StoreAdapter, Map<string, unknown>>();

function sliceCursor(store: StoreAdapter, id: string, rows: number): SliceCursor {
  let byInvariant = places.get(store);
  if (!byInvariant) places.set(store, (byInvariant = new Map()));
  const m = byInvariant;
  return { rows, get: () => m.get(id), set: (place) => m.set(id, place) };
}

/** What one cycle found. Ids and reason codes only. */
export interface CycleReport extends Recorded {
  /** The snapshot was read (false: H-01 snapshot_failed, nothing else could be judged). */
  ok: boolean;
  /** Open violations after this cycle. */
  violated: boolean;
  /** A full check over all history (true), or a cycle over the activity since the checkpoints. */
  full: boolean;
  started_at: number;
  completed_at: number;
  duration_ms: number;
  /** The events the activity invariants read (absent when the snapshot failed). */
  events?: EventsRead;
  checks: Array<Omit<CheckResult, 'findings' | 'checked_at'> & { findings: Array<Pick<Finding, 'subject' | 'reason'>> }>;
}

/** A check's result from its findings. `cutNew`: see Findings. */
function finish(id: string, found: Findings, checkedAt: number, notes: string[] = []): CheckResult & { cutNew: boolean } {
  const { findings, truncated, cutNew } = found.result();
  return {
    id,
    status: findings.length ? 'violated' : 'ok',
    findings,
    truncated,
    checked_at: checkedAt,
    ...(notes.length ? { notes } : {}),
    cutNew,
  };
}

async function judgeState(
  tx: Tx,
  kind: StoreKind,
  inv: StateInvariant,
  now: number,
  timing: CanaryTiming,
  open: ReadonlySet<string>,
  slices: SliceCursor | undefined,
) {
  const notes: string[] = [];
  const ctx: CheckContext = {
    now,
    graceMs: inv.grace(timing),
    timing,
    kind,
    note: (t) => notes.push(t),
    open,
    ...(slices ? { slices } : {}),
  };
  const population = await inv.population(tx, ctx);
  const found = new Findings(open);
  found.add(inv.evaluate(population, ctx));
  return finish(inv.id, found, now, notes);
}

/**
 * One canary cycle: evaluate every invariant over one consistent snapshot — state invariants over
 * the current non-terminal rows, activity invariants over the events since their checkpoints
 * (or, with `full`, over all history) — judge H-01, then record findings (open / still open /
 * resolved), move the checkpoints and queue alerts for invariants that changed colour, in one
 * transaction. A failed snapshot read is a finding (H-01), never a clean fleet: it resolves
 * nothing and moves no checkpoint.
 */
export async function runCanaryOnce(opts: CanaryRunOptions): Promise<CycleReport> {
  const { store } = opts;
  const clock = opts.clock ?? (() => store.now());
  const timing: CanaryTiming = { ...DEFAULT_TIMING, ...opts.timing };
  const invariants = opts.invariants ?? CATALOGUE;
  const full = opts.full ?? false;
  const startedAt = clock();
  await store.db.updateTable('canary_state').set({ last_started_at: startedAt }).where('id', '=', 'canary').execute();

  let results: CheckResult[] = [];
  let moves: CheckpointMove[] = [];
  let events: EventsRead | undefined;
  let evidence: Evidence | undefined;
  let before: Evidence | undefined;
  let previous: { maxEventId: number; pruned: number } | undefined;
  let failure: string | undefined;
  try {
    // Evidence from outside the snapshot, read before it begins.
    before = await readEvidence(store.db);
    const prev = await store.db
      .selectFrom('canary_checkpoints')
      .select(['event_id', 'state'])
      .where('invariant', '=', H01_CHECKPOINT)
      .executeTakeFirst();
    if (prev)
      previous = { maxEventId: Number(prev.event_id), pruned: Number((JSON.parse(prev.state ?? '{}') as { pruned?: number }).pruned ?? 0) };

    const read = await store.snapshot(async (tx) => {
      const stored = await tx.selectFrom('canary_checkpoints').select(['invariant', 'event_id', 'state']).execute();
      const checkpoints = new Map<string, Checkpoint>(stored.map((c) => [c.invariant, { event_id: Number(c.event_id), state: c.state }]));
      const openRows = await tx
        .selectFrom('canary_violations')
        .select(['invariant', 'subject', 'agent', 'reason', 'detail'])
        .where('resolved_at', 'is', null)
        .execute();
      const open = new Map<string, OpenViolation[]>();
      for (const v of openRows) {
        const list = open.get(v.invariant) ?? [];
        list.push({ subject: v.subject, agent: v.agent, reason: v.reason, detail: v.detail === null ? null : JSON.parse(v.detail) });
        open.set(v.invariant, list);
      }
      const openSubjects = (id: string) => new Set((open.get(id) ?? []).map((v) => v.subject));

      const byId = new Map<string, CheckResult>();
      for (const inv of invariants.filter(isState)) {
        const slices = full ? undefined : sliceCursor(store, inv.id, opts.sliceRows ?? SLICE_ROWS);
        const { cutNew: _c, ...r } = await judgeState(tx, store.kind, inv, clock(), timing, openSubjects(inv.id), slices);
        byId.set(inv.id, r);
        await yieldToLoop();
      }
      const activity = await judgeActivity(tx, invariants.filter(isActivity), {
        full,
        kind: store.kind,
        now: clock(),
        timing,
        checkpoints,
        open,
        readBudgetMs: opts.readBudgetMs ?? Infinity,
      });
      const moves: CheckpointMove[] = [];
      for (const a of activity.results) {
        const { cutNew, ...r } = finish(a.id, a.findings, a.checked_at, a.notes);
        byId.set(a.id, r);
        // New subjects were cut: read the same events again next cycle (new subjects go first,
        // so each such cycle opens up to MAX_FINDINGS more of them).
        if (a.next && !cutNew) moves.push({ invariant: a.id, from: a.from, next: a.next });
      }
      const evidence = await readEvidence(tx);
      return { rs: invariants.map((i) => byId.get(i.id)!), moves, events: activity.events, evidence };
    });
    results = read.rs;
    moves = read.moves;
    events = read.events;
    evidence = read.evidence;
  } catch (err: any) {
    failure = typeof err?.code === 'string' ? err.code : 'error';
  }

  const h01 = judgeH01(failure, evidence, before, previous);
  const h01Result: CheckResult = {
    id: H01.id,
    status: h01.length ? 'violated' : 'ok',
    findings: h01,
    truncated: false,
    checked_at: clock(),
  };
  const evaluated = [...results, h01Result];
  const now = clock();
  const recorded = await record(store, evaluated, now, opts.sinks ?? [], { ok: !failure, startedAt, evidence, checkpoints: moves });
  return {
    ok: !failure,
    violated: recorded.open > 0,
    full,
    started_at: startedAt,
    completed_at: now,
    duration_ms: now - startedAt,
    ...(events ? { events } : {}),
    checks: evaluated.map(({ findings, checked_at: _c, ...rest }) => ({
      ...rest,
      findings: findings.map((f) => ({ subject: f.subject, reason: f.reason })),
    })),
    ...recorded,
  };
}
