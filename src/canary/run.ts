import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { CanaryViolationsTable } from '../store/schema.ts';
import type { Selectable } from 'kysely';
import { enqueueAlerts, type AlertSink } from './alerts.ts';
import { CATALOGUE, H01, invariantMeta } from './catalogue.ts';
import { DEFAULT_TIMING, type CanaryTiming } from './graces.ts';
import { isSkip, MAX_FINDINGS, type CheckContext, type CheckResult, type Finding, type Invariant } from './types.ts';

export interface CanaryRunOptions {
  store: StoreAdapter;
  /** Milliseconds since the epoch; each check reads it for itself. Default Date.now. */
  clock?: () => number;
  /** The watched components' timing; graces derive from it. Default: src/config.ts. */
  timing?: Partial<CanaryTiming>;
  /** Alert sinks to queue transitions for. Default none. */
  sinks?: AlertSink[];
  /** Default: the whole catalogue. */
  invariants?: readonly Invariant[];
}

/** What one cycle found. Ids and reason codes only. */
export interface CycleReport {
  /** The snapshot was read (false: H-01 snapshot_failed, nothing else could be judged). */
  ok: boolean;
  /** Open violations after this cycle. */
  violated: boolean;
  started_at: number;
  completed_at: number;
  duration_ms: number;
  checks: Array<Omit<CheckResult, 'findings' | 'checked_at'> & { findings: Array<Pick<Finding, 'subject' | 'reason'>> }>;
  opened: number;
  resolved: number;
  open: number;
  /** Invariants that turned red or green this cycle (alerts were queued for them). */
  transitions: Array<{ invariant: string; transition: 'violated' | 'resolved' }>;
}

type Violation = Selectable<CanaryViolationsTable>;
const key = (invariant: string, subject: string) => `${invariant}\u0000${subject}`;
const CHUNK = 200;

function chunks<T>(xs: T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += CHUNK) out.push(xs.slice(i, i + CHUNK));
  return out;
}

/** One finding per subject: the first reason wins. */
function dedupe(findings: Finding[]): Finding[] {
  const seen = new Set<string>();
  return findings.filter((f) => !seen.has(f.subject) && (seen.add(f.subject), true));
}

/**
 * One canary cycle: evaluate every invariant over one consistent snapshot, judge H-01, then
 * record findings (open / still open / resolved) and queue alerts for invariants that changed
 * colour. A failed snapshot read is a finding (H-01), never a clean fleet: it resolves nothing.
 */
export async function runCanaryOnce(opts: CanaryRunOptions): Promise<CycleReport> {
  const { store } = opts;
  const clock = opts.clock ?? Date.now;
  const timing: CanaryTiming = { ...DEFAULT_TIMING, ...opts.timing };
  const invariants = opts.invariants ?? CATALOGUE;
  const startedAt = clock();

  const prev = await store.db.selectFrom('canary_state').select(['seen_executions', 'seen_event_id']).where('id', '=', 'canary').executeTakeFirst();
  await store.db.updateTable('canary_state').set({ last_started_at: startedAt }).where('id', '=', 'canary').execute();

  let results: CheckResult[] = [];
  let evidence: { executions: number; maxEventId: number } | undefined;
  let failure: string | undefined;
  try {
    const read = await store.snapshot(async (tx) => {
      const rs: CheckResult[] = [];
      for (const inv of invariants) rs.push(await check(tx, inv, clock(), timing, store.kind));
      const ex = await tx.selectFrom('executions').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
      const ev = await tx.selectFrom('execution_events').select((eb) => eb.fn.max<number>('id').as('m')).executeTakeFirstOrThrow();
      return { rs, evidence: { executions: Number(ex.n), maxEventId: Number(ev.m ?? 0) } };
    });
    results = read.rs;
    evidence = read.evidence;
  } catch (err: any) {
    failure = typeof err?.code === 'string' ? err.code : 'error';
  }

  const h01 = await judgeH01(store, failure, evidence, prev, startedAt);
  const h01Result: CheckResult = { id: H01.id, status: h01.length ? 'violated' : 'ok', findings: h01, truncated: false, checked_at: clock() };
  const evaluated = [...results, h01Result];
  const now = clock();
  const recorded = await record(store, evaluated, now, opts.sinks ?? [], { ok: !failure, startedAt, evidence });
  return {
    ok: !failure,
    violated: recorded.open > 0,
    started_at: startedAt,
    completed_at: now,
    duration_ms: now - startedAt,
    checks: evaluated.map(({ findings, checked_at: _c, ...rest }) => ({ ...rest, findings: findings.map((f) => ({ subject: f.subject, reason: f.reason })) })),
    ...recorded,
  };
}

async function check(tx: Tx, inv: Invariant, now: number, timing: CanaryTiming, kind: StoreAdapter['kind']): Promise<CheckResult> {
  const notes: string[] = [];
  const ctx: CheckContext = { now, graceMs: inv.grace(timing), timing, kind, note: (t) => notes.push(t) };
  const population = await inv.population(tx, ctx);
  if (isSkip(population)) return { id: inv.id, status: 'skipped', skipped_reason: population.skip, findings: [], truncated: false, checked_at: now };
  const all = dedupe(inv.evaluate(population, ctx));
  const truncated = all.length > MAX_FINDINGS;
  const findings = all.slice(0, MAX_FINDINGS);
  return { id: inv.id, status: findings.length ? 'violated' : 'ok', findings, truncated, checked_at: now, ...(notes.length ? { notes } : {}) };
}

/** H-01: a failed read, or a snapshot that contradicts evidence read outside it. */
async function judgeH01(
  store: StoreAdapter,
  failure: string | undefined,
  evidence: { executions: number; maxEventId: number } | undefined,
  prev: { seen_executions: number | null; seen_event_id: number | null } | undefined,
  startedAt: number,
): Promise<Finding[]> {
  if (failure || !evidence) return [{ subject: 'canary', reason: 'snapshot_failed', detail: { code: failure ?? 'error' } }];
  const seenEx = prev?.seen_executions === null || prev?.seen_executions === undefined ? null : Number(prev.seen_executions);
  const seenEv = prev?.seen_event_id === null || prev?.seen_event_id === undefined ? null : Number(prev.seen_event_id);
  // Executions and events are never deleted, so a later snapshot never sees fewer.
  if ((seenEx !== null && evidence.executions < seenEx) || (seenEv !== null && evidence.maxEventId < seenEv)) {
    return [{ subject: 'canary', reason: 'snapshot_regressed', detail: { executions: evidence.executions, previously: seenEx, max_event_id: evidence.maxEventId, previous_event_id: seenEv } }];
  }
  if (evidence.executions === 0) {
    const outside = await store.db.selectFrom('execution_events').select((eb) => eb.fn.countAll<number>().as('n')).where('at', '<=', startedAt).executeTakeFirst();
    if (Number(outside?.n ?? 0) > 0) return [{ subject: 'canary', reason: 'empty_snapshot_contradicted', detail: { events_outside: Number(outside!.n) } }];
  }
  return [];
}

async function record(
  store: StoreAdapter,
  evaluated: CheckResult[],
  now: number,
  sinks: AlertSink[],
  cycle: { ok: boolean; startedAt: number; evidence?: { executions: number; maxEventId: number } },
): Promise<Pick<CycleReport, 'opened' | 'resolved' | 'open' | 'transitions'>> {
  return store.transaction(async (tx) => {
    // Serialises recorders (the timer and an on-demand run): each sees the other's open rows.
    await store.lockRows(tx.selectFrom('canary_state').select('id').where('id', '=', 'canary'), 'wait').executeTakeFirst();
    const open: Violation[] = await tx.selectFrom('canary_violations').selectAll().where('resolved_at', 'is', null).execute();
    const openBefore = new Map<string, Violation>(open.map((v) => [key(v.invariant, v.subject), v]));
    let opened = 0;
    let resolved = 0;

    for (const r of evaluated) {
      if (r.status === 'skipped') continue;
      const meta = invariantMeta(r.id)!;
      const seen = new Set<string>();
      const stillOpen: number[] = [];
      const fresh: Finding[] = [];
      for (const f of r.findings) {
        seen.add(f.subject);
        const existing = openBefore.get(key(r.id, f.subject));
        if (existing) stillOpen.push(Number(existing.id));
        else fresh.push(f);
      }
      for (const ids of chunks(stillOpen)) await tx.updateTable('canary_violations').set({ last_seen: now }).where('id', 'in', ids).execute();
      for (const part of chunks(fresh)) {
        await tx
          .insertInto('canary_violations')
          .values(part.map((f) => ({ invariant: r.id, subject: f.subject, agent: f.agent ?? null, tier: meta.tier, severity: meta.severity, reason: f.reason, detail: f.detail ? JSON.stringify(f.detail) : null, first_seen: now, last_seen: now })))
          .execute();
      }
      opened += fresh.length;
      // A truncated population did not look at every subject: what it did not see is not resolved.
      if (r.truncated) continue;
      const gone = open.filter((v) => v.invariant === r.id && !seen.has(v.subject)).map((v) => Number(v.id));
      for (const ids of chunks(gone)) await tx.updateTable('canary_violations').set({ resolved_at: now }).where('id', 'in', ids).execute();
      resolved += gone.length;
    }

    const after = await tx.selectFrom('canary_violations').select(['invariant', 'subject', 'reason']).where('resolved_at', 'is', null).orderBy('id').execute();
    const transitions: CycleReport['transitions'] = [];
    const invariants = new Set([...open.map((v) => v.invariant), ...after.map((v) => v.invariant)]);
    for (const inv of invariants) {
      const was = open.some((v) => v.invariant === inv);
      const now_ = after.filter((v) => v.invariant === inv);
      if (was === now_.length > 0) continue;
      const transition = now_.length > 0 ? 'violated' : 'resolved';
      transitions.push({ invariant: inv, transition });
      await enqueueAlerts(tx, sinks, { invariant: inv, transition, subjects: now_.slice(0, 20).map((v) => v.subject), count: now_.length, reasons: [...new Set(now_.map((v) => v.reason))], at: now });
    }

    await tx
      .updateTable('canary_state')
      .set((eb) => ({
        last_completed_at: now,
        last_ok: cycle.ok ? 1 : 0,
        last_duration_ms: now - cycle.startedAt,
        cycles: eb('cycles', '+', 1),
        ...(cycle.evidence ? { seen_executions: cycle.evidence.executions, seen_event_id: cycle.evidence.maxEventId } : {}),
      }))
      .where('id', '=', 'canary')
      .execute();
    return { opened, resolved, open: after.length, transitions };
  });
}
