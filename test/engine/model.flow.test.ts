/**
 * Model test of flow control: random sequences of keyed submits (with priorities), claims,
 * completions and clock steps against two agents that draw from one pool with seats and a
 * throttle; one agent caps each key (one key with a bigger override). After every step the rows
 * and the event log must hold every limit: running per key, per agent and per pool at most the
 * cap, starts per throttle window at most limit + burst. Each claim of one task must take the
 * first admissible task in the documented order (priority, fair_round, queued_at), and a claim
 * that leaves work queued must have had no room for it (a limit was full, the throttle closed, or
 * the pool's free seats were held for the other agent's turn). The turns are modelled here from
 * their rule (src/domain/pool-turns.ts) and the pool's waits must match the model after each step.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POOL_TURN_REFRESH_MS, POOL_TURN_TTL_MS } from '../../src/domain/pool-turns.ts';
import { afterStart, throttleAdmits, type Throttle } from '../../src/domain/throttle.ts';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let run = 0;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'model-flow', backlogExpiryMs: 30 * 24 * 3_600_000 });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

const KEYS = ['k0', 'k1', 'k2'];
const KEY_CAP = 1;
const OVERRIDES: Record<string, number> = { k0: 2 };
const POOL_SEATS = 3;
const THROTTLE: Throttle = { limit: 6, period_seconds: 10, burst: 2 };
const MAX_PARALLEL = [3, 2];

type Cmd =
  | { kind: 'submit'; agent: number; key: number; priority: number }
  | { kind: 'claim'; agent: number; max: number }
  | { kind: 'complete'; pick: number }
  | { kind: 'advance'; ms: number };

const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('submit' as const),
      agent: fc.nat({ max: 1 }),
      // k0 (the override) most often, so its bigger cap is reached; KEYS.length: no key.
      key: fc.constantFrom(0, 0, 0, 1, 2, KEYS.length),
      priority: fc.integer({ min: 0, max: 1 }),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({ kind: fc.constant('claim' as const), agent: fc.nat({ max: 1 }), max: fc.integer({ min: 1, max: 3 }) }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('complete' as const), pick: fc.nat({ max: 5 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.constantFrom(1_000, 3_000, 5_000, 11_000) }) },
);

interface Row {
  id: string;
  agent: string;
  status: string;
  flow_key: string | null;
  priority: number;
  fair_round: number;
  queued_at: number;
  lease_token: string | null;
}

async function rowsOf(agents: string[]): Promise<Row[]> {
  const rows = await ts.store.db
    .selectFrom('executions')
    .select(['id', 'agent', 'status', 'flow_key', 'priority', 'fair_round', 'queued_at', 'lease_token'])
    .where('agent', 'in', agents)
    .execute();
  return rows.map((r) => ({ ...r, priority: Number(r.priority), fair_round: Number(r.fair_round), queued_at: Number(r.queued_at) }));
}

/** The pool throttle's state replayed from the event log's starts (in id order), and the starts. */
async function throttleReplay(agents: string[]): Promise<{ tat: number | null; starts: number[] }> {
  const ev = await ts.store.db
    .selectFrom('execution_events')
    .select('at')
    .where('agent', 'in', agents)
    .where('to_status', '=', 'running')
    .orderBy('id')
    .execute();
  let tat: number | null = null;
  const starts = ev.map((e) => Number(e.at));
  for (const s of starts) tat = afterStart(THROTTLE, tat, s);
  return { tat, starts };
}

const capOf = (agent: number, key: string | null) => (agent === 0 && key !== null ? (OVERRIDES[key] ?? KEY_CAP) : Infinity);

/** What the store holds after a step: the next step starts from it (nothing writes in between). */
interface Seen {
  rows: Row[];
  tat: number | null;
}

/** Every limit, on the rows and the event log; what was read, for the next step. */
async function checkLimits(names: string[]): Promise<Seen> {
  const rows = await rowsOf(names);
  const running = rows.filter((r) => r.status === 'running');
  expect(running.length).toBeLessThanOrEqual(POOL_SEATS);
  names.forEach((name, a) => {
    const mine = running.filter((r) => r.agent === name);
    expect(mine.length).toBeLessThanOrEqual(MAX_PARALLEL[a]!);
    for (const key of KEYS) expect(mine.filter((r) => r.flow_key === key).length).toBeLessThanOrEqual(capOf(a, key));
  });
  const { tat, starts } = await throttleReplay(names);
  for (let i = 0, j = 0; i < starts.length; i++) {
    while (starts[i]! - starts[j]! >= THROTTLE.period_seconds * 1000) j++;
    expect(i - j + 1).toBeLessThanOrEqual(THROTTLE.limit + THROTTLE.burst);
  }
  return { rows, tat };
}

/** Queued rows of agent `a` whose own limits (agent seats, key cap) have room now. */
function admissible(rows: Row[], names: string[], a: number): Row[] {
  const running = rows.filter((r) => r.status === 'running' && r.agent === names[a]);
  if (running.length >= MAX_PARALLEL[a]!) return [];
  return rows.filter(
    (r) =>
      r.status === 'queued' &&
      r.agent === names[a] &&
      running.filter((x) => x.flow_key === r.flow_key && r.flow_key !== null).length < capOf(a, r.flow_key),
  );
}

/** The model of the pool's waits for a turn: per agent, since when it waits and when it was last seen. */
type Waits = Map<string, { since: number; seen_at: number }>;
const live = (waits: Waits, now: number) => [...waits].filter(([, w]) => now - w.seen_at < POOL_TURN_TTL_MS);
/** Live waits of the other agent that come before agent `name`'s in turn order (since, then name). */
function aheadOf(waits: Waits, name: string, now: number): number {
  const all = live(waits, now);
  const mine = all.find(([a]) => a === name)?.[1];
  return all.filter(([a, w]) => a !== name && (!mine || w.since < mine.since || (w.since === mine.since && a < name))).length;
}
/** After a claim of `name` stopped by the pool's seats or turns alone: its wait kept, or begun at the back. */
function keepWait(waits: Waits, name: string, now: number): void {
  const all = live(waits, now);
  const mine = all.find(([a]) => a === name)?.[1];
  if (mine) {
    // A wait seen lately is not written again (src/engine/pool-turns.ts).
    if (now - mine.seen_at >= POOL_TURN_REFRESH_MS / 2) waits.set(name, { since: mine.since, seen_at: now });
    return;
  }
  const last = Math.max(-Infinity, ...all.map(([, w]) => w.since));
  waits.set(name, { since: Math.max(now, last + 1), seen_at: now });
}

const order = (x: Row, y: Row) => x.priority - y.priority || x.fair_round - y.fair_round || x.queued_at - y.queued_at;

async function step(cmd: Cmd, names: string[], waits: Waits, seen: Seen): Promise<void> {
  switch (cmd.kind) {
    case 'submit': {
      const key = cmd.key < KEYS.length ? KEYS[cmd.key] : undefined;
      await engine.submit(names[cmd.agent]!, { message: 'm', priority: cmd.priority, ...(key ? { key } : {}) }, 'model');
      return;
    }
    case 'claim': {
      const before = seen.rows;
      const room = admissible(before, names, cmd.agent).sort(order);
      const poolFree = POOL_SEATS - before.filter((r) => r.status === 'running').length;
      const now = clock();
      const open = throttleAdmits(THROTTLE, seen.tat, now);
      const name = names[cmd.agent]!;
      const turnRoom = poolFree - aheadOf(waits, name, now);
      const got = await engine.claim(name, { owner: `w${run}`, max: cmd.max });
      if (room.length > 0 && turnRoom > 0 && open) {
        // Room everywhere: at least one task is admitted, and the first is first in the order.
        expect(got.length).toBeGreaterThan(0);
        const first = before.find((r) => r.id === got[0]!.id)!;
        expect(order(first, room[0]!)).toBeLessThanOrEqual(0);
      } else {
        expect(got).toEqual([]);
      }
      // Its wait: kept only when it had work and the pool's seats (or the other's turn) alone stopped it.
      if (room.length > 0 && turnRoom <= 0 && open) keepWait(waits, name, now);
      else waits.delete(name);
      const stored = await ts.store.db.selectFrom('pool_waits').select(['agent', 'since', 'seen_at']).where('agent', 'in', names).execute();
      expect(new Map(stored.map((w) => [w.agent, { since: Number(w.since), seen_at: Number(w.seen_at) }]))).toEqual(waits);
      return;
    }
    case 'complete': {
      const running = seen.rows.filter((r) => r.status === 'running').sort((x, y) => (x.id < y.id ? -1 : 1));
      const r = running[cmd.pick % Math.max(1, running.length)];
      if (!r) return;
      await engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'model');
      return;
    }
    case 'advance':
      clock.advance(cmd.ms);
      return;
  }
}

describe(`flow-control model (${STORE_KIND})`, () => {
  it('keys, a pool with seats, turns and a throttle hold after every random step; claims take the first admissible task', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(cmdArb, { minLength: 10, maxLength: 40 }), async (cmds) => {
        run++;
        const pool = `mf-pool-${run}`;
        const names = [`mf-a-${run}`, `mf-b-${run}`];
        await engine.pools.create({ name: pool, max_parallel: POOL_SEATS, throttle: THROTTLE }, 'model');
        await engine.agents.create(
          {
            name: names[0]!,
            max_parallel: MAX_PARALLEL[0]!,
            max_backlog: 100,
            lease_ttl_seconds: 3600,
            key_max_parallel: KEY_CAP,
            key_overrides: OVERRIDES,
            pools: [pool],
          },
          'model',
        );
        await engine.agents.create(
          { name: names[1]!, max_parallel: MAX_PARALLEL[1]!, max_backlog: 100, lease_ttl_seconds: 3600, pools: [pool] },
          'model',
        );
        const waits: Waits = new Map();
        // The agents are new: no rows, no starts.
        let seen: Seen = { rows: [], tat: null };
        for (const cmd of cmds) {
          clock.advance(1);
          await step(cmd, names, waits, seen);
          seen = await checkLimits(names);
        }
      }),
      { numRuns: 40, seed: process.env.BATON_MODEL_SEED ? Number(process.env.BATON_MODEL_SEED) : undefined },
    );
  }, 240_000);
});
