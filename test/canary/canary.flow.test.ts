/**
 * The flow-control invariants, each twice: a violating history or state written into the
 * database fires with its diagnosis, and the same limits honoured by admission stay silent.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { diagnose } from '../../src/canary/catalogue.ts';
import { runCanaryOnce } from '../../src/canary/run.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { NewExecution } from '../../src/store/schema.ts';
import { manualClock } from '../helpers/clock.ts';
import { runningRow, writeRow } from '../helpers/canary.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let n = 0;
const name = (p: string) => `flow-${p}-${++n}`;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'canary-flow', backlogExpiryMs: 30 * 24 * 3_600_000 });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

/** The reasons one invariant found about `subject` in a fresh cycle. */
async function findings(id: string, subject: string): Promise<string[]> {
  clock.advance(1);
  const r = await runCanaryOnce({ store: ts.store, clock });
  const check = r.checks.find((c) => c.id === id);
  expect(check, id).toBeDefined();
  return check!.findings.filter((f) => f.subject === subject).map((f) => f.reason);
}

/** Make a queued row running without the admission path (a buggy writer), as the trigger records it. */
async function forceRunning(agent: string, extra: Partial<NewExecution> = {}): Promise<string> {
  const row = await writeRow(ts.store, clock(), { agent, ...extra });
  clock.advance(1);
  const now = clock();
  await ts.store.db
    .updateTable('executions')
    .set({ ...runningRow(now, agent), changed_at: now, changed_by: 'bug' })
    .where('id', '=', row.id)
    .execute();
  return row.id;
}

const claimAll = (agent: string) => engine.claim(agent, { owner: 'w', max: 10 });

describe(`F-01 flow limits held at every admission (${STORE_KIND})`, () => {
  it('fires when a key runs past its cap, and is silent while admission keeps it', async () => {
    const agent = name('key');
    await engine.agents.create({ name: agent, max_parallel: 5, key_max_parallel: 1 }, 'test');
    for (const key of ['k1', 'k1', 'k2']) {
      clock.advance(1);
      await engine.submit(agent, { message: key, key }, 'test');
    }
    const admitted = await claimAll(agent);
    expect(admitted.map((r) => r.flow_key).sort()).toEqual(['k1', 'k2']);
    for (const r of admitted) expect(await findings('F-01', r.id)).toEqual([]);
    const bug = await forceRunning(agent, { flow_key: 'k1' });
    expect(await findings('F-01', bug)).toEqual(['key_over_cap']);
    expect(diagnose('F-01', 'key_over_cap')).toMatch(/flow-keys/);
  });

  it("fires when a pool's agents run past its seats", async () => {
    const pool = name('pool');
    await engine.pools.create({ name: pool, max_parallel: 2 }, 'test');
    const a = name('pa');
    const b = name('pb');
    await engine.agents.create({ name: a, max_parallel: 5, pools: [pool] }, 'test');
    await engine.agents.create({ name: b, max_parallel: 5, pools: [pool] }, 'test');
    clock.advance(1);
    for (const agent of [a, a, b]) await engine.submit(agent, { message: 'x' }, 'test');
    expect(await claimAll(a)).toHaveLength(2);
    expect(await claimAll(b)).toHaveLength(0);
    const bug = await forceRunning(b);
    expect(await findings('F-01', bug)).toEqual(['pool_over_cap']);
  });

  it("fires when starts exceed a throttle's limit + burst in one window", async () => {
    const agent = name('thr');
    await engine.agents.create({ name: agent, max_parallel: 10, throttle: { limit: 2, period_seconds: 60, burst: 0 } }, 'test');
    clock.advance(1);
    for (let i = 0; i < 3; i++) await engine.submit(agent, { message: `t${i}` }, 'test');
    const first = await claimAll(agent);
    expect(first).toHaveLength(1);
    clock.advance(30_000);
    const second = await claimAll(agent);
    expect(second).toHaveLength(1);
    for (const r of [...first, ...second]) expect(await findings('F-01', r.id)).toEqual([]);
    const bug = await forceRunning(agent);
    expect(await findings('F-01', bug)).toEqual(['throttle_exceeded']);
  });
});

describe(`F-02 a debounced burst is one run (${STORE_KIND})`, () => {
  it('is silent while submits fold, and fires when a second debounced task waits beside the first', async () => {
    const agent = name('deb');
    await engine.agents.create({ name: agent, max_parallel: 1 }, 'test');
    const one = await engine.submit(agent, { message: 'a', key: 'pr:1', debounce_seconds: 60 }, 'test');
    const two = await engine.submit(agent, { message: 'b', key: 'pr:1', debounce_seconds: 60 }, 'test');
    expect(two.id).toBe(one.id);
    expect(await findings('F-02', `${agent}/pr:1`)).toEqual([]);
    await writeRow(ts.store, clock(), { agent, flow_key: 'pr:1', debounce_seconds: 60, run_after: clock() + 60_000 });
    expect(await findings('F-02', `${agent}/pr:1`)).toEqual(['debounce_split']);
  });
});
