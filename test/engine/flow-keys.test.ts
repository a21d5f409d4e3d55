import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AlreadyRunning } from '../../src/domain/errors.ts';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

// Concurrency keys: caps, fairness across keys, per-key throttle, debounce and singleton; on the
// manual clock, on both stores (PostgreSQL: the fast claim path where the agent has no key limit).

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let n = 0;
let agent: string;
const DAY = 86_400_000;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'flow-keys-test', backlogExpiryMs: DAY });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});
beforeEach(() => {
  agent = `keys-${++n}`;
});

const submit = (key: string | null, message = 'task', more: Record<string, unknown> = {}) => {
  clock.advance(1);
  return engine.submit(agent, { message, key, ...more }, 'key:test');
};
const claimAll = async (max = 100) => engine.claim(agent, { owner: 'w', max });
const finish = async (id: string, token: string) => engine.complete(id, token, { status: 'succeeded' } as never, 'w');

describe(`concurrency keys (${STORE_KIND})`, () => {
  it('caps running tasks per key, with an override, counted within one batch', async () => {
    await engine.agents.create({ name: agent, max_parallel: 20, key_max_parallel: 2, key_overrides: { big: 3 } }, 'test');
    for (let i = 0; i < 5; i++) await submit('small');
    for (let i = 0; i < 5; i++) await submit('big');
    await submit(null);
    const rows = await claimAll();
    const per = (k: string | null) => rows.filter((r) => r.flow_key === k).length;
    expect([per('small'), per('big'), per(null)]).toEqual([2, 3, 1]);
    // Full keys admit nothing more until a seat of theirs frees.
    expect(await claimAll()).toEqual([]);
    const small = rows.find((r) => r.flow_key === 'small')!;
    await finish(small.id, small.lease_token!);
    const next = await claimAll();
    expect(next.map((r) => r.flow_key)).toEqual(['small']);
    const detail = await engine.getExecution((await submit('small')).id);
    expect(detail.waiting?.reason).toBe('key_busy');
    expect(detail.waiting?.key).toMatchObject({ key: 'small', max_parallel: 2, running: 2 });
    expect(detail.waiting?.key?.holders.map((h) => h.execution_id).sort()).toHaveLength(2);
  });

  it('takes turns among keys: a flood on one key delays another key by at most one turn', async () => {
    await engine.agents.create({ name: agent, max_parallel: 1, max_backlog: 1000 }, 'test');
    for (let i = 0; i < 200; i++) await submit('A');
    const [first] = await claimAll(1);
    expect(first!.flow_key).toBe('A');
    const b = await submit('B');
    await finish(first!.id, first!.lease_token!);
    // One more A (the round B joined), then B.
    const order: string[] = [];
    for (let i = 0; i < 3; i++) {
      const [r] = await claimAll(1);
      order.push(r!.id === b.id ? 'B' : r!.flow_key!);
      await finish(r!.id, r!.lease_token!);
    }
    expect(order.indexOf('B')).toBeLessThanOrEqual(1);
    expect(order).toContain('B');
  });

  it('throttles each key separately and says when it next admits', async () => {
    await engine.agents.create({ name: agent, max_parallel: 10, key_throttle: { limit: 1, period_seconds: 60, burst: 0 } }, 'test');
    await submit('k');
    await submit('k');
    await submit('other');
    const rows = await claimAll();
    expect(rows.map((r) => r.flow_key).sort()).toEqual(['k', 'other']);
    const queued = (await engine.listExecutions({ agent, status: ['queued'], limit: 10 }))[0]!;
    const waiting = (await engine.getExecution(queued.id)).waiting;
    expect(waiting?.reason).toBe('key_throttled');
    expect(Date.parse(waiting!.key!.next_start_at!)).toBe(rows[0]!.started_at! + 60_000);
    clock.advance(60_000);
    expect((await claimAll()).map((r) => r.id)).toEqual([queued.id]);
  });

  it('debounce folds a burst into one task: every caller gets its id, the last message and payload win', async () => {
    await engine.agents.create({ name: agent, max_parallel: 5 }, 'test');
    const seen: boolean[] = [];
    const burst = [];
    for (let i = 0; i < 4; i++) {
      clock.advance(1000);
      burst.push(
        await engine.submit(agent, { message: `m${i}`, payload: { i }, key: 'doc:1', debounce_seconds: 5 }, 'key:test', undefined, (a) =>
          seen.push(a.debounced ?? false),
        ),
      );
    }
    expect(new Set(burst.map((r) => r.id)).size).toBe(1);
    expect(seen).toEqual([false, true, true, true]);
    expect(await claimAll()).toEqual([]); // not due: the window moved with each submit
    clock.advance(5000);
    const ran = await claimAll();
    expect(ran).toHaveLength(1);
    expect(ran[0]).toMatchObject({ id: burst[0]!.id, message: 'm3', payload: JSON.stringify({ i: 3 }) });
    // Once it runs, the next submit starts a new window.
    const after = await engine.submit(agent, { message: 'late', key: 'doc:1', debounce_seconds: 5 }, 'key:test');
    expect(after.id).not.toBe(burst[0]!.id);
  });

  it('a singleton key refuses a second live task, naming it', async () => {
    await engine.agents.create({ name: agent, max_parallel: 5 }, 'test');
    const first = await submit('job', 'one', { singleton: true });
    const refused = await submit('job', 'two', { singleton: true }).catch((e) => e);
    expect(refused).toBeInstanceOf(AlreadyRunning);
    expect(refused.details.execution_id).toBe(first.id);
    const [running] = await claimAll();
    expect((await submit('job', 'three', { singleton: true }).catch((e) => e)).details.execution_id).toBe(first.id);
    await finish(running!.id, running!.lease_token!);
    expect((await submit('job', 'four', { singleton: true })).id).not.toBe(first.id);
  });

  it('copies the key to a policy retry', async () => {
    await engine.agents.create({ name: agent, max_parallel: 5, retry_policy: { max_attempts: 2 } as never }, 'test');
    await submit('r');
    const [r] = await claimAll();
    await engine.complete(r!.id, r!.lease_token!, { status: 'failed', error: { code: 'x', message: 'x' } } as never, 'w');
    const queued = await engine.listExecutions({ agent, status: ['queued'], limit: 10 });
    expect(queued.map((q) => q.flow_key)).toEqual(['r']);
  });
});
