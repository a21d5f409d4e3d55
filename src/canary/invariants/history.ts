import { isTerminal, TERMINAL_STATES } from '../../domain/states.ts';
import type { Tx } from '../../store/adapter.ts';
import { EVENTS_PER_CHUNK, readEvents } from '../events.ts';
import { forScope, inScope, status, statuses } from '../sql.ts';
import { idChunks, yieldToLoop, type ActivityInvariant, type EventRow, type Finding, type OpenViolation } from '../types.ts';

const zero = () => 0;
const terminal = (s: string | null) => s !== null && isTerminal(s);

const leftTerminal = (e: Pick<EventRow, 'execution_id' | 'agent' | 'id' | 'from_status' | 'to_status'>): Finding => ({
  subject: e.execution_id,
  agent: e.agent,
  reason: 'left_terminal',
  detail: { event_id: e.id, from: e.from_status, to: e.to_status },
});

/** E-02, on the append-only event log: a terminal state is final. */
export const E02: ActivityInvariant = {
  kind: 'activity',
  id: 'E-02',
  tier: 'A',
  severity: 'critical',
  holds: 'no execution ever left a terminal state (event log)',
  diagnoses: {
    left_terminal: 'an execution moved out of a terminal state: a status writer in src/engine/transitions/ lost its compare-and-set guard',
  },
  grace: zero,
  events(chunk) {
    return { findings: chunk.filter((e) => terminal(e.from_status) && e.to_status !== e.from_status).map(leftTerminal), judge: [] };
  },
  /** An open violation stays open while its execution's events still show it (until pruned). */
  async recheck(tx, open) {
    const out: Finding[] = [];
    for (const ids of idChunks(open.map((v) => v.subject))) {
      const rows = await tx
        .selectFrom('execution_events')
        .select(['id', 'execution_id', 'agent', 'from_status', 'to_status'])
        .where('execution_id', 'in', ids)
        .where('from_status', 'in', statuses(TERMINAL_STATES))
        .whereRef('to_status', '<>', 'from_status')
        .execute();
      out.push(...rows.map((r) => leftTerminal({ ...r, id: Number(r.id) })));
    }
    return out;
  },
};

/**
 * E-08: cancellation is sticky. Every status change writes an event, so an execution that was
 * cancelled and holds another state now shows up in the events since the checkpoint either as
 * its cancellation or as the change away from `cancelled`; those executions are judged as they
 * are now (the full check judges every cancellation in the log).
 */
export const E08: ActivityInvariant = {
  kind: 'activity',
  id: 'E-08',
  tier: 'A',
  severity: 'critical',
  holds: 'no execution that was cancelled holds another state now',
  diagnoses: {
    cancel_overwritten:
      'a cancelled execution was later written with another state: a completion or the reaper ignored cancellation (transitions/complete.ts, expire.ts, release.ts)',
  },
  grace: zero,
  events(chunk) {
    return {
      findings: [],
      judge: chunk.filter((e) => e.to_status === 'cancelled' || e.from_status === 'cancelled').map((e) => e.execution_id),
    };
  },
  rows: (tx, scope) =>
    forScope(scope, async (part) => {
      const rows = await tx
        .selectFrom('executions as e')
        .innerJoin('execution_events as ev', 'ev.execution_id', 'e.id')
        .select(['e.id', 'e.agent', 'e.status', (eb) => eb.fn.max<number>('ev.id').as('event_id')])
        .where((eb) => inScope(eb, 'e.id', part))
        .where('e.status', '<>', status('cancelled'))
        .where('ev.to_status', '=', status('cancelled'))
        .groupBy(['e.id', 'e.agent', 'e.status'])
        .execute();
      return rows.map((r) => ({
        subject: r.id,
        agent: r.agent,
        reason: 'cancel_overwritten',
        detail: { status: r.status, cancelled_event_id: Number(r.event_id) },
      }));
    }),
};

/** Per agent, the executions holding a seat according to the replay so far. */
export type Seats = Map<string, Set<string>>;

/**
 * Replay admissions and seat releases in event id order, carrying `seats` forward: a cycle
 * continues from the state its checkpoint saved, a full check starts from an empty one. Pure.
 */
export function replaySeats(events: readonly EventRow[], seats: Seats): Finding[] {
  const out: Finding[] = [];
  for (const e of events) {
    const admitted = e.to_status === 'running' && e.from_status !== 'running';
    const released = e.from_status === 'running' && e.to_status !== 'running';
    if (!admitted && !released) continue;
    let held = seats.get(e.agent);
    if (!held) seats.set(e.agent, (held = new Set()));
    if (released) {
      held.delete(e.execution_id);
      if (held.size === 0) seats.delete(e.agent);
      continue;
    }
    held.add(e.execution_id);
    if (e.seats_in_use !== null && e.seat_cap !== null && e.seats_in_use > e.seat_cap) {
      out.push({
        subject: e.execution_id,
        agent: e.agent,
        reason: 'over_admitted',
        detail: { event_id: e.id, seats_in_use: e.seats_in_use, seat_cap: e.seat_cap },
      });
    } else if (e.seat_cap !== null && held.size > e.seat_cap) {
      out.push({
        subject: e.execution_id,
        agent: e.agent,
        reason: 'over_admitted_replay',
        detail: { event_id: e.id, replayed_running: held.size, seat_cap: e.seat_cap },
      });
    }
  }
  return out;
}

/** Which of `ids` are executions still (the pruner deletes only terminal ones, with their events). */
export async function existingExecutions(tx: Tx, ids: readonly string[]): Promise<Set<string>> {
  const present = new Set<string>();
  for (const chunk of idChunks(ids)) {
    for (const r of await tx.selectFrom('executions').select('id').where('id', 'in', chunk).execute()) present.add(r.id);
  }
  return present;
}

/** Open violations that are historical facts (an admission past a limit): each stays open while its execution exists. */
export async function stillOpenWhileExecutionExists(tx: Tx, open: readonly OpenViolation[]): Promise<Finding[]> {
  const present = await existingExecutions(
    tx,
    open.map((v) => v.subject),
  );
  return open
    .filter((v) => present.has(v.subject))
    .map((v) => ({ subject: v.subject, agent: v.agent, reason: v.reason, detail: v.detail ?? undefined }));
}

/** S-02's replay over the whole event log from an empty state, in chunks (the chaos report's check). */
export async function replayAllSeats(tx: Tx): Promise<Finding[]> {
  const seats: Seats = new Map();
  const out: Finding[] = [];
  for (let after = 0; ;) {
    const chunk = await readEvents(tx, after, EVENTS_PER_CHUNK);
    out.push(...replaySeats(chunk, seats));
    if (chunk.length < EVENTS_PER_CHUNK) return out;
    after = chunk[chunk.length - 1]!.id;
    await yieldToLoop();
  }
}

export const seatsState = {
  initial: (): Seats => new Map(),
  load(json: string): Seats {
    const o = JSON.parse(json) as { seats?: Record<string, string[]> };
    return new Map(Object.entries(o.seats ?? {}).map(([agent, ids]) => [agent, new Set(ids)]));
  },
  save(seats: Seats): string {
    return JSON.stringify({
      seats: Object.fromEntries([...seats].filter(([, ids]) => ids.size > 0).map(([agent, ids]) => [agent, [...ids].sort()])),
    });
  },
  /**
   * A seat whose execution no longer exists was freed: only the pruner deletes executions, only
   * terminal ones, and it takes their events (the release too) with them.
   */
  async prune(tx: Tx, seats: Seats): Promise<void> {
    const present = await existingExecutions(
      tx,
      [...seats.values()].flatMap((ids) => [...ids]),
    );
    for (const [agent, ids] of seats) {
      for (const id of ids) if (!present.has(id)) ids.delete(id);
      if (ids.size === 0) seats.delete(agent);
    }
  },
};

/**
 * S-02: over-admission never happened. Two independent readings of the event log: the seats the
 * admission trigger counted against the cap it saw, and a replay of every admission and seat
 * release in event order (event ids are drawn before commit, and every admission of an agent
 * holds the agent lock, so replayed counts never exceed what the admission really saw). The
 * replay carries the seats in use per agent in its checkpoint, so a cycle reads only the events
 * since then.
 */
export const S02: ActivityInvariant<Seats> = {
  kind: 'activity',
  id: 'S-02',
  tier: 'A',
  severity: 'critical',
  holds: 'per agent, running ≤ max_parallel at every admission (event log: recorded seats, and a replay)',
  diagnoses: {
    over_admitted:
      'an admission counted more running executions than the cap it saw: admission is not exact (transitions/admit.ts agent lock / running count)',
    over_admitted_replay:
      'replaying admissions and releases from the event log exceeds the cap: admission is not exact, or a seat was taken without the admission path (transitions/admit.ts)',
  },
  grace: zero,
  state: seatsState,
  events(chunk, seats) {
    return { findings: replaySeats(chunk, seats), judge: [] };
  },
  /** An over-admission is a historical fact: it stays open while its execution (and so its events) exists. */
  async recheck(tx, open) {
    return stillOpenWhileExecutionExists(tx, open);
  },
};
