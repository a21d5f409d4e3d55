import { describe, expect, it } from 'vitest';
import { ApiError, type BatonClient } from '../../src/client.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { createWorker } from '../../src/worker/sdk.ts';
import { testNodeHooks, until } from '../helpers/delivery.ts';
import { STORE_KIND, type TestStore } from '../helpers/store.ts';

// One worker serving several agents: each agent's concurrency is its own, every task runs once,
// and a bad agent among them fails start() before anything is claimed.
describe(`one worker for several agents (${STORE_KIND})`, () => {
  let ts: TestStore;
  let node: BatonNode;
  let api: BatonClient;
  let key: string;
  testNodeHooks((t) => ({ ts, node, api, key } = t));

  it('runs every task of every agent once, never more than `concurrency` of one agent at a time', async () => {
    const agents = ['multi-a', 'multi-b', 'multi-c'];
    const perAgent = 12;
    for (const name of agents) await api.createAgent({ name, max_parallel: 5, max_backlog: 100 });
    const running = new Map(agents.map((a) => [a, 0]));
    const most = new Map(agents.map((a) => [a, 0]));
    const seen: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const w = createWorker({
      server: node.url,
      key,
      agents,
      concurrency: 2,
      claimWaitSeconds: 1,
      async handler(task) {
        const now = running.get(task.agent)! + 1;
        running.set(task.agent, now);
        most.set(task.agent, Math.max(most.get(task.agent)!, now));
        seen.push(`${task.agent}/${(task.payload as { i: number }).i}`);
        await gate; // the first tasks of each agent are held until every agent's slots are full
        await new Promise((r) => setTimeout(r, 1));
        running.set(task.agent, running.get(task.agent)! - 1);
        return { ok: true };
      },
    });
    await w.start();
    try {
      for (let i = 0; i < perAgent; i++) for (const a of agents) await api.submit(a, { message: 't', payload: { i } });
      await until('both slots of every agent taken', () => w.active === agents.length * 2);
      expect([...running.values()]).toEqual([2, 2, 2]);
      release();
      await until('all done', async () => {
        const rows = await ts.store.db.selectFrom('executions').select('status').where('agent', 'in', agents).execute();
        return rows.filter((r) => r.status === 'succeeded').length === agents.length * perAgent || undefined;
      });
    } finally {
      release();
      await w.stop();
    }
    expect([...most.values()]).toEqual([2, 2, 2]);
    expect(seen.length).toBe(agents.length * perAgent);
    expect(new Set(seen).size).toBe(seen.length);
    const rows = await ts.store.db.selectFrom('executions').select(['attempt', 'status']).where('agent', 'in', agents).execute();
    expect(rows.every((r) => r.attempt === 1 && r.status === 'succeeded')).toBe(true);
  });

  it('start() fails on an unknown agent among them, and nothing was claimed', async () => {
    await api.createAgent({ name: 'multi-known', max_parallel: 1, max_backlog: 10 });
    const queued = await api.submit('multi-known', { message: 'stays queued' });
    const w = createWorker({ server: node.url, key, agents: ['multi-known', 'multi-nobody'], handler: () => undefined });
    const err = await w.start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(404);
    await w.stop();
    expect((await api.getExecution(queued.execution_id)).status).toBe('queued');
  });

  it('takes `agent` or `agents`, exactly one, no name twice', () => {
    const base = { server: node.url, key, handler: () => undefined };
    // The types refuse these too; a JavaScript caller gets the same answer at run time.
    expect(() => createWorker({ ...base } as never)).toThrow(/exactly one/);
    expect(() => createWorker({ ...base, agent: 'a', agents: ['b'] } as never)).toThrow(/exactly one/);
    expect(() => createWorker({ ...base, agents: [] })).toThrow(/empty/);
    expect(() => createWorker({ ...base, agents: ['a', 'a'] })).toThrow(/twice/);
  });
});
