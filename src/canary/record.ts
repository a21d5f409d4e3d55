import type { Selectable } from 'kysely';
import type { ViolationTransition } from '../domain/canary.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { CanaryViolationsTable } from '../store/schema.ts';
import type { Checkpoint } from './activity.ts';
import { enqueueAlerts, type AlertSink } from './alerts.ts';
import { invariantMeta } from './catalogue.ts';
import { H01_CHECKPOINT, type Evidence } from './evidence.ts';
import { idChunks, type CheckResult, type Finding } from './types.ts';

type Violation = Selectable<CanaryViolationsTable>;
const key = (invariant: string, subject: string) => `${invariant}\u0000${subject}`;
const ROWS_PER_STATEMENT = 200;

export interface CheckpointMove {
  invariant: string;
  /** The checkpoint the cycle started from: moved only if nobody moved it meanwhile. */
  from: number;
  next: Checkpoint;
}

export interface Recorded {
  opened: number;
  resolved: number;
  open: number;
  /** Invariants that turned red or green this cycle (alerts were queued for them). */
  transitions: Array<{ invariant: string; transition: ViolationTransition }>;
}

/**
 * Record one cycle in one write transaction: open / still open / resolved violations, alerts for
 * invariants that changed colour, the checkpoints and H-01's evidence. Checkpoints move in the
 * same transaction as the findings judged up to them, so a crash never leaves a checkpoint past
 * findings that were not stored.
 */
export async function record(
  store: StoreAdapter,
  evaluated: CheckResult[],
  now: number,
  sinks: AlertSink[],
  cycle: { ok: boolean; startedAt: number; evidence?: Evidence; checkpoints: CheckpointMove[] },
): Promise<Recorded> {
  return store.transaction(async (tx) => {
    // Serialises recorders (the timer and an on-demand run): each sees the other's open rows.
    await store.lockRows(tx.selectFrom('canary_state').select('id').where('id', '=', 'canary'), 'wait').executeTakeFirst();
    const open: Violation[] = await tx.selectFrom('canary_violations').selectAll().where('resolved_at', 'is', null).execute();
    const openBefore = new Map<string, Violation>(open.map((v) => [key(v.invariant, v.subject), v]));
    let opened = 0;
    let resolved = 0;

    for (const r of evaluated) {
      if (r.status === 'skipped') continue;
      const n = await recordCheck(tx, r, open, openBefore, now, cycle.startedAt);
      opened += n.opened;
      resolved += n.resolved;
    }

    const after = await tx
      .selectFrom('canary_violations')
      .select(['invariant', 'subject', 'reason'])
      .where('resolved_at', 'is', null)
      .orderBy('id')
      .execute();
    const transitions: Recorded['transitions'] = [];
    const invariants = new Set([...open.map((v) => v.invariant), ...after.map((v) => v.invariant)]);
    for (const inv of invariants) {
      const was = open.some((v) => v.invariant === inv);
      const now_ = after.filter((v) => v.invariant === inv);
      if (was === now_.length > 0) continue;
      const transition = now_.length > 0 ? 'violated' : 'resolved';
      transitions.push({ invariant: inv, transition });
      await enqueueAlerts(tx, sinks, {
        invariant: inv,
        transition,
        subjects: now_.slice(0, 20).map((v) => v.subject),
        count: now_.length,
        reasons: [...new Set(now_.map((v) => v.reason))],
        at: now,
      });
    }

    if (cycle.ok) await moveCheckpoints(tx, cycle, now);

    await tx
      .updateTable('canary_state')
      .set((eb) => ({
        last_completed_at: now,
        last_ok: cycle.ok ? 1 : 0,
        last_duration_ms: now - cycle.startedAt,
        cycles: eb('cycles', '+', 1),
        ...(cycle.evidence ? { seen_event_id: cycle.evidence.maxEventId } : {}),
      }))
      .where('id', '=', 'canary')
      .execute();
    return { opened, resolved, open: after.length, transitions };
  });
}

/**
 * Record one check's findings: bump the violations still open, open the new ones, resolve the
 * ones this cycle no longer finds. Returns how many it opened and resolved.
 */
async function recordCheck(
  tx: Tx,
  r: CheckResult,
  open: Violation[],
  openBefore: Map<string, Violation>,
  now: number,
  startedAt: number,
): Promise<{ opened: number; resolved: number }> {
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
  for (const ids of idChunks(stillOpen, ROWS_PER_STATEMENT))
    await tx.updateTable('canary_violations').set({ last_seen: now }).where('id', 'in', ids).execute();
  for (const part of idChunks(fresh, ROWS_PER_STATEMENT)) {
    await tx
      .insertInto('canary_violations')
      .values(
        part.map((f) => ({
          invariant: r.id,
          subject: f.subject,
          agent: f.agent ?? null,
          tier: meta.tier,
          severity: meta.severity,
          reason: f.reason,
          detail: f.detail ? JSON.stringify(f.detail) : null,
          first_seen: now,
          last_seen: now,
        })),
      )
      .execute();
  }
  const opened = fresh.length;
  // A truncated check did not keep every finding: what it cut is not resolved.
  if (r.truncated) return { opened, resolved: 0 };
  // Only what this cycle's snapshot could have re-judged: a row another recorder saw (or
  // re-saw) after this cycle began may be newer than this snapshot.
  const gone = open
    .filter((v) => v.invariant === r.id && !seen.has(v.subject) && Number(v.last_seen) <= startedAt)
    .map((v) => Number(v.id));
  for (const ids of idChunks(gone, ROWS_PER_STATEMENT))
    await tx.updateTable('canary_violations').set({ resolved_at: now }).where('id', 'in', ids).execute();
  return { opened, resolved: gone.length };
}

/** Move the checkpoints this cycle judged up to (and H-01's evidence), unless another cycle moved them meanwhile. */
async function moveCheckpoints(tx: Tx, cycle: { evidence?: Evidence; checkpoints: CheckpointMove[] }, now: number): Promise<void> {
  const stored = new Map(
    (await tx.selectFrom('canary_checkpoints').select(['invariant', 'event_id']).execute()).map((c) => [c.invariant, Number(c.event_id)]),
  );
  const moves: Array<{ invariant: string; event_id: number; state: string | null }> = [];
  for (const c of cycle.checkpoints) {
    // Another cycle recorded meanwhile and moved it: its state, not ours, continues from there.
    if ((stored.get(c.invariant) ?? 0) !== c.from) continue;
    moves.push({ invariant: c.invariant, ...c.next });
  }
  if (cycle.evidence)
    moves.push({
      invariant: H01_CHECKPOINT,
      event_id: cycle.evidence.maxEventId,
      state: JSON.stringify({ pruned: cycle.evidence.pruned }),
    });
  for (const m of moves) {
    await tx
      .insertInto('canary_checkpoints')
      .values({ ...m, updated_at: now })
      .onConflict((oc) => oc.column('invariant').doUpdateSet({ event_id: m.event_id, state: m.state, updated_at: now }))
      .execute();
  }
}
