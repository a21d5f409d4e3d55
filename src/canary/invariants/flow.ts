import { keyCap, keyLimits, type KeyLimits } from '../../domain/flow.ts';
import { parsePools } from '../../domain/pools.ts';
import { parseThrottle, type Throttle } from '../../domain/throttle.ts';
import { sql } from 'kysely';
import { inIndexOrder } from '../../engine/candidates.ts';
import type { Tx } from '../../store/adapter.ts';
import { status } from '../sql.ts';
import { type ActivityInvariant, type EventRow, type Finding, type StateInvariant } from '../types.ts';
import { existingExecutions, stillOpenWhileExecutionExists } from './history.ts';

/**
 * Two processes' clocks agree to within this much (on PostgreSQL every process reads the
 * database's clock through a measured offset): a throttle's window is judged this much short, so
 * starts stamped by two processes a hair apart are not taken for one start too many.
 */
const CLOCK_AGREEMENT_MS = 25;
/** A throttle whose window may hold more starts than this is not replayed (its record would be large). */
const MAX_REPLAYED_STARTS = 10_000;

/** The flow limits in force now, read every cycle before the replay (never saved). */
interface Limits {
  agents: Map<string, { updated_at: number; keys: KeyLimits | null; throttle: Throttle | null; pools: string[] }>;
  pools: Map<string, { updated_at: number; max_parallel: number | null; throttle: Throttle | null; members: string[] }>;
}

export interface FlowState {
  /** Per agent with a flow limit, the executions holding a seat and their keys. */
  seats: Map<string, Map<string, string | null>>;
  /** Per throttled scope: its throttle as it was (a change starts the record afresh) and its recent starts. */
  starts: Map<string, { throttle: string; at: number[] }>;
  limits: Limits;
}

const noLimits = (): Limits => ({ agents: new Map(), pools: new Map() });

async function readLimits(tx: Tx): Promise<Limits> {
  const limits = noLimits();
  const agents = await tx
    .selectFrom('agents')
    .select(['name', 'updated_at', 'key_max_parallel', 'key_overrides', 'key_throttle', 'throttle', 'pools'])
    .where((eb) =>
      eb.or([
        eb('key_max_parallel', 'is not', null),
        eb('key_overrides', 'is not', null),
        eb('key_throttle', 'is not', null),
        eb('throttle', 'is not', null),
        eb('pools', 'is not', null),
      ]),
    )
    .execute();
  for (const a of agents) {
    limits.agents.set(a.name, {
      updated_at: Number(a.updated_at),
      keys: keyLimits(a),
      throttle: parseThrottle(a.throttle),
      pools: parsePools(a.pools),
    });
  }
  for (const p of await tx.selectFrom('pools').select(['name', 'updated_at', 'max_parallel', 'throttle']).execute()) {
    limits.pools.set(p.name, {
      updated_at: Number(p.updated_at),
      max_parallel: p.max_parallel === null ? null : Number(p.max_parallel),
      throttle: parseThrottle(p.throttle),
      members: [],
    });
  }
  for (const [name, a] of limits.agents) for (const p of a.pools) limits.pools.get(p)?.members.push(name);
  return limits;
}

/** Record one start in `scope` under throttle `t`; true when its window then holds more than limit + burst. */
function startExceeds(state: FlowState, scope: string, t: Throttle, at: number): boolean {
  const allowed = t.limit + t.burst;
  if (allowed > MAX_REPLAYED_STARTS) return false;
  const throttle = JSON.stringify(t);
  let rec = state.starts.get(scope);
  if (!rec || rec.throttle !== throttle) state.starts.set(scope, (rec = { throttle, at: [] }));
  const from = at - t.period_seconds * 1000 + CLOCK_AGREEMENT_MS;
  rec.at = rec.at.filter((s) => s > from);
  rec.at.push(at);
  const exceeded = rec.at.length > allowed;
  if (rec.at.length > allowed) rec.at.splice(0, rec.at.length - allowed);
  return exceeded;
}

/**
 * Replay admissions and seat releases in event id order, as S-02 does for the agent's own cap,
 * judging each admission by the limits in force now. An agent or pool changed after the event is
 * not judged by today's limits (its limit, or a pool's members, may have been different then).
 */
export function replayFlow(events: readonly EventRow[], state: FlowState): Finding[] {
  const out: Finding[] = [];
  const { agents, pools } = state.limits;
  for (const e of events) {
    const held = state.seats.get(e.agent);
    if (e.from_status === 'running' && e.to_status !== 'running') {
      held?.delete(e.execution_id);
      if (held?.size === 0) state.seats.delete(e.agent);
      continue;
    }
    if (e.to_status !== 'running' || e.from_status === 'running') continue;
    const a = agents.get(e.agent);
    if (!a) continue;
    const seats = held ?? new Map<string, string | null>();
    if (!held) state.seats.set(e.agent, seats);
    seats.set(e.execution_id, e.flow_key);
    const finding = (reason: string, detail: Record<string, unknown>) =>
      out.push({ subject: e.execution_id, agent: e.agent, reason, detail: { event_id: e.id, ...detail } });
    const judged = a.updated_at <= e.at;
    if (judged && e.flow_key !== null) {
      const cap = keyCap(a.keys, e.flow_key);
      if (cap !== null) {
        let running = 0;
        for (const k of seats.values()) if (k === e.flow_key) running++;
        if (running > cap) finding('key_over_cap', { key: e.flow_key, running, cap });
      }
      const kt = a.keys?.throttle;
      if (kt && startExceeds(state, `k:${e.agent}:${e.flow_key}`, kt, e.at)) finding('throttle_exceeded', { key: e.flow_key });
    }
    if (judged && a.throttle && startExceeds(state, `a:${e.agent}`, a.throttle, e.at)) finding('throttle_exceeded', { throttle: 'agent' });
    for (const name of a.pools) {
      const p = pools.get(name);
      if (!p || p.updated_at > e.at || p.members.some((m) => agents.get(m)!.updated_at > e.at)) continue;
      if (p.max_parallel !== null) {
        let running = 0;
        for (const m of p.members) running += state.seats.get(m)?.size ?? 0;
        if (running > p.max_parallel) finding('pool_over_cap', { pool: name, running, cap: p.max_parallel });
      }
      if (p.throttle && startExceeds(state, `p:${name}`, p.throttle, e.at)) finding('throttle_exceeded', { pool: name });
    }
  }
  return out;
}

/**
 * F-01: every flow limit held at every admission, from the event log (each admission's event
 * carries its task's key): running tasks per key at most the key's cap, running tasks of a pool's
 * agents at most the pool's seats, and starts in any window of a throttle's period at most its
 * limit + burst (agent, key and pool throttles). The replay's seats and recent starts are carried
 * in the checkpoint, so a cycle reads only the events since then.
 */
export const F01: ActivityInvariant<FlowState> = {
  kind: 'activity',
  id: 'F-01',
  tier: 'A',
  severity: 'critical',
  holds: 'per key, per pool and per throttle, no admission went past its limit (event log replay)',
  diagnoses: {
    key_over_cap:
      "replayed running tasks of one key exceed the key's cap: key admission is not exact (src/engine/flow-keys.ts, under the agent lock)",
    pool_over_cap:
      "replayed running tasks of a pool's agents exceed its seats: pool admission is not exact (src/engine/pools.ts, the pool row lock)",
    throttle_exceeded:
      'more starts than limit + burst in one window of a throttle: its state was not advanced under its lock (src/engine/pools.ts, flow-keys.ts)',
  },
  grace: () => 0,
  state: {
    initial: () => ({ seats: new Map(), starts: new Map(), limits: noLimits() }),
    load(json) {
      const o = JSON.parse(json) as {
        seats?: Record<string, Record<string, string | null>>;
        starts?: Record<string, { throttle: string; at: number[] }>;
      };
      return {
        seats: new Map(Object.entries(o.seats ?? {}).map(([agent, ids]) => [agent, new Map(Object.entries(ids))])),
        starts: new Map(Object.entries(o.starts ?? {})),
        limits: noLimits(),
      };
    },
    save(state) {
      return JSON.stringify({
        seats: Object.fromEntries(
          [...state.seats].filter(([, ids]) => ids.size > 0).map(([agent, ids]) => [agent, Object.fromEntries(ids)]),
        ),
        starts: Object.fromEntries(state.starts),
      });
    },
    /** The limits in force now; seats of pruned executions are free; starts older than their window go. */
    async prune(tx, state) {
      state.limits = await readLimits(tx);
      const present = await existingExecutions(
        tx,
        [...state.seats.values()].flatMap((ids) => [...ids.keys()]),
      );
      for (const [agent, ids] of state.seats) {
        for (const id of ids.keys()) if (!present.has(id)) ids.delete(id);
        if (ids.size === 0 || !state.limits.agents.has(agent)) state.seats.delete(agent);
      }
    },
  },
  events(chunk, state) {
    return { findings: replayFlow(chunk, state), judge: [] };
  },
  /** A limit passed is a historical fact: it stays open while its execution exists. */
  recheck: (tx, open) => stillOpenWhileExecutionExists(tx, open),
};

interface DebounceRow {
  agent: string;
  flow_key: string;
  n: number;
}

/**
 * F-02: a debounced burst is one run. While a key's debounced task is queued and not yet due,
 * every debounced submit on that key folds into it, so two of them at once mean a burst split in
 * two. Reads the waiting debounced rows through executions_debounce_open: cost follows live work.
 */
export const F02: StateInvariant<DebounceRow> = {
  kind: 'state',
  id: 'F-02',
  tier: 'A',
  severity: 'critical',
  holds: 'per agent and key, at most one debounced task is queued and not yet due',
  diagnoses: {
    debounce_split:
      'two debounced tasks of one key wait at once: a debounced submit did not fold into the open one (src/engine/flow-submit.ts, under the new-work turn)',
  },
  grace: () => 0,
  async population(tx, ctx) {
    // Per agent, a seek of executions_debounce_open (led by agent) in its order: two waiting
    // debounced tasks of one key show as more such tasks than keys; only then are that agent's
    // keys named. The ordered inner read, under inIndexOrder, is what keeps PostgreSQL on that
    // index: a plan through executions_status_recent would have to sort (SQLite seeks it unasked).
    const agents = await inIndexOrder({ kind: ctx.kind }, tx, () =>
      tx
        .selectFrom('agents as a')
        .select('a.name')
        .select((eb) =>
          eb
            .selectFrom(
              eb
                .selectFrom('executions as e')
                .select('e.flow_key')
                .whereRef('e.agent', '=', 'a.name')
                .where('e.status', '=', status('queued'))
                .where('e.flow_key', 'is not', null)
                .where('e.debounce_seconds', 'is not', null)
                .where('e.run_after', '>', ctx.now)
                .$if(ctx.kind === 'postgres', (q) => q.orderBy('e.flow_key').orderBy('e.run_after'))
                .as('w'),
            )
            .select(sql<number>`count(*) - count(distinct w.flow_key)`.as('extra'))
            .as('extra'),
        )
        .execute(),
    );
    const out: DebounceRow[] = [];
    for (const a of agents) {
      if (Number(a.extra ?? 0) <= 0) continue;
      const keys = await tx
        .selectFrom('executions')
        .select(['flow_key'])
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('agent', '=', a.name)
        .where('status', '=', status('queued'))
        .where('flow_key', 'is not', null)
        .where('debounce_seconds', 'is not', null)
        .where('run_after', '>', ctx.now)
        .groupBy('flow_key')
        .having((eb) => eb.fn.countAll(), '>', 1)
        .execute();
      for (const k of keys) out.push({ agent: a.name, flow_key: k.flow_key!, n: Number(k.n) });
    }
    return out;
  },
  evaluate(rows) {
    return rows.map((r) => ({
      subject: `${r.agent}/${r.flow_key}`,
      agent: r.agent,
      reason: 'debounce_split',
      detail: { key: r.flow_key, waiting: Number(r.n) },
    }));
  },
};
