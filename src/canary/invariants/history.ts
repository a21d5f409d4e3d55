import { TERMINAL_STATES } from '../../domain/states.ts';
import { MAX_FINDINGS, type Finding, type Invariant } from '../types.ts';

const zero = () => 0;

interface LeftTerminal {
  event_id: number;
  execution_id: string;
  agent: string;
  from_status: string;
  to_status: string;
}

/** E-02, on the append-only event log: a terminal state is final. */
export const E02: Invariant<LeftTerminal> = {
  id: 'E-02',
  tier: 'A',
  severity: 'critical',
  holds: 'no execution ever left a terminal state (event log)',
  diagnoses: {
    left_terminal: 'an execution moved out of a terminal state: a status writer in src/engine/transitions/ lost its compare-and-set guard',
  },
  grace: zero,
  async population(tx) {
    const rows = await tx
      .selectFrom('execution_events')
      .select(['id as event_id', 'execution_id', 'agent', 'from_status', 'to_status'])
      .where('from_status', 'in', [...TERMINAL_STATES])
      .whereRef('to_status', '<>', 'from_status')
      .orderBy('id')
      .limit(MAX_FINDINGS + 1)
      .execute();
    return rows.map((r) => ({ ...r, event_id: Number(r.event_id), from_status: r.from_status! }));
  },
  evaluate(rows) {
    return rows
      .filter((r) => (TERMINAL_STATES as readonly string[]).includes(r.from_status) && r.to_status !== r.from_status)
      .map((r) => ({ subject: r.execution_id, agent: r.agent, reason: 'left_terminal', detail: { event_id: r.event_id, from: r.from_status, to: r.to_status } }));
  },
};

interface UnCancelled {
  id: string;
  agent: string;
  status: string;
  event_id: number;
}

/** E-08: cancellation is sticky — compared between the event log and the row as it is now. */
export const E08: Invariant<UnCancelled> = {
  id: 'E-08',
  tier: 'A',
  severity: 'critical',
  holds: 'no execution that was cancelled holds another state now',
  diagnoses: {
    cancel_overwritten: 'a cancelled execution was later written with another state: a completion or the reaper ignored cancellation (transitions/complete.ts, expire.ts, release.ts)',
  },
  grace: zero,
  async population(tx) {
    const rows = await tx
      .selectFrom('execution_events as ev')
      .innerJoin('executions as e', 'e.id', 'ev.execution_id')
      .select(['e.id', 'e.agent', 'e.status', 'ev.id as event_id'])
      .where('ev.to_status', '=', 'cancelled')
      .where('e.status', '<>', 'cancelled')
      .orderBy('ev.id')
      .limit(MAX_FINDINGS + 1)
      .execute();
    return rows.map((r) => ({ ...r, event_id: Number(r.event_id) }));
  },
  evaluate(rows) {
    return rows.filter((r) => r.status !== 'cancelled').map((r) => ({ subject: r.id, agent: r.agent, reason: 'cancel_overwritten', detail: { status: r.status, cancelled_event_id: r.event_id } }));
  },
};

interface SeatEvent {
  id: number;
  execution_id: string;
  agent: string;
  from_status: string | null;
  to_status: string;
  seats_in_use: number | null;
  seat_cap: number | null;
}

/**
 * S-02: over-admission never happened. Two independent readings of the event log: the seats the
 * admission trigger counted against the cap it saw, and a replay of every admission and seat
 * release in event order (event ids are drawn before commit, and every admission of an agent
 * holds the agent lock, so replayed counts never exceed what the admission really saw).
 */
export const S02: Invariant<SeatEvent> = {
  id: 'S-02',
  tier: 'A',
  severity: 'critical',
  holds: 'per agent, running ≤ max_parallel at every admission (event log: recorded seats, and a replay)',
  diagnoses: {
    over_admitted: 'an admission counted more running executions than the cap it saw: admission is not exact (transitions/admit.ts agent lock / running count)',
    over_admitted_replay: 'replaying admissions and releases from the event log exceeds the cap: admission is not exact, or a seat was taken without the admission path (transitions/admit.ts)',
  },
  grace: zero,
  async population(tx) {
    const rows = await tx
      .selectFrom('execution_events')
      .select(['id', 'execution_id', 'agent', 'from_status', 'to_status', 'seats_in_use', 'seat_cap'])
      .where((eb) => eb.or([eb('to_status', '=', 'running'), eb('from_status', '=', 'running')]))
      .orderBy('id')
      .execute();
    return rows.map((r) => ({ ...r, id: Number(r.id), seats_in_use: r.seats_in_use === null ? null : Number(r.seats_in_use), seat_cap: r.seat_cap === null ? null : Number(r.seat_cap) }));
  },
  evaluate(rows) {
    const out: Finding[] = [];
    const flagged = new Set<string>();
    const running = new Map<string, Set<string>>();
    for (const e of rows) {
      const seats = running.get(e.agent) ?? new Set<string>();
      running.set(e.agent, seats);
      const admitted = e.to_status === 'running' && e.from_status !== 'running';
      const released = e.from_status === 'running' && e.to_status !== 'running';
      if (released) seats.delete(e.execution_id);
      if (!admitted) continue;
      seats.add(e.execution_id);
      const key = `${e.execution_id}#${e.id}`;
      if (e.seats_in_use !== null && e.seat_cap !== null && e.seats_in_use > e.seat_cap) {
        out.push({ subject: e.execution_id, agent: e.agent, reason: 'over_admitted', detail: { event_id: e.id, seats_in_use: e.seats_in_use, seat_cap: e.seat_cap } });
        flagged.add(key);
      } else if (e.seat_cap !== null && seats.size > e.seat_cap && !flagged.has(key)) {
        out.push({ subject: e.execution_id, agent: e.agent, reason: 'over_admitted_replay', detail: { event_id: e.id, replayed_running: seats.size, seat_cap: e.seat_cap } });
      }
    }
    return out;
  },
};
