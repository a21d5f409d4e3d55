/**
 * The worker SDK against a server older than it: one without POST /v1/claim (and its widening and
 * withdrawal), or without POST /v1/completions too. A real server behind a small real HTTP proxy that answers
 * those paths as such a server's router does (404 `no route`) and passes everything else through.
 * The worker claims per agent over the agent's own route instead, as the SDK did before the route
 * for many agents: every task runs once, within each agent's cap and the worker's concurrency,
 * with heartbeats and no lapse. A 404 that names a missing agent is a final answer still.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatonClient } from '../../src/client.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { createWorker, type WorkerEvent } from '../../src/worker/sdk.ts';
import { startTestNode, until } from '../helpers/delivery.ts';
import { oldServer } from '../helpers/old-server.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

describe(`the worker SDK against a server without POST /v1/claim (${STORE_KIND})`, () => {
  let ts: TestStore;
  let node: BatonNode;
  let api: BatonClient;
  let key: string;
  beforeAll(async () => {
    ts = await openTestStore();
    ({ node, api, key } = await startTestNode(ts, { dispatcher: false, reaperIntervalMs: 200 }));
  });
  afterAll(async () => {
    await node?.stop();
    await ts?.cleanup();
  });

  const cases = [
    { name: 'without POST /v1/claim', missing: ['POST /v1/claim', 'POST /v1/claim/widen', 'POST /v1/claim/withdraw'] },
    {
      name: 'without POST /v1/claim nor POST /v1/completions',
      missing: ['POST /v1/claim', 'POST /v1/claim/widen', 'POST /v1/claim/withdraw', 'POST /v1/completions'],
    },
  ];
  for (const [n, { name, missing }] of cases.entries()) {
    it(`${name}: claims per agent, every task once within each cap, heartbeats, no lapse`, async () => {
      const old = await oldServer(node.url, missing);
      const agents = [`old${n}-a`, `old${n}-b`, `old${n}-c`, `old${n}-d`];
      const cap = (i: number) => (i % 2 === 0 ? 3 : 1); // odd agents: the server's cap binds, not the worker's
      const PER_AGENT = 8;
      // 2 s leases and tasks held up to 1.5 s: most are renewed at least once while they run.
      for (const [i, a] of agents.entries())
        await api.createAgent({ name: a, max_parallel: cap(i), max_backlog: 100, lease_ttl_seconds: 2 });
      const running = new Map<string, number>();
      const most = new Map<string, number>();
      const seen: string[] = [];
      const events: WorkerEvent[] = [];
      const w = createWorker({
        server: old.url,
        key,
        agents,
        concurrency: 2,
        claimWaitSeconds: 2,
        async handler(task) {
          const now = (running.get(task.agent) ?? 0) + 1;
          running.set(task.agent, now);
          most.set(task.agent, Math.max(most.get(task.agent) ?? 0, now));
          seen.push(task.executionId);
          await new Promise((r) => setTimeout(r, Math.random() * 1_500));
          running.set(task.agent, running.get(task.agent)! - 1);
          return { ok: true };
        },
        onEvent: (e) => void events.push(e),
      });
      await w.start();
      try {
        for (let i = 0; i < PER_AGENT; i++) for (const a of agents) await api.submit(a, { message: `t${i}` });
        await until(
          'every task succeeded',
          async () => {
            if (w.failure) throw w.failure;
            const rows = await ts.store.db.selectFrom('executions').select('status').where('agent', 'in', agents).execute();
            return rows.filter((r) => r.status === 'succeeded').length === agents.length * PER_AGENT || undefined;
          },
          120_000,
          100,
        );
      } finally {
        await w.stop();
        await old.close();
      }
      expect(w.failure).toBeUndefined();
      const rows = await ts.store.db.selectFrom('executions').select(['attempt', 'status']).where('agent', 'in', agents).execute();
      expect(rows.filter((r) => r.status !== 'succeeded' || r.attempt !== 1)).toEqual([]);
      expect(seen.length).toBe(agents.length * PER_AGENT);
      expect(new Set(seen).size).toBe(seen.length);
      for (const [i, a] of agents.entries()) expect(most.get(a), a).toBeLessThanOrEqual(Math.min(cap(i), 2));
      expect(events.filter((e) => e.type === 'task:lapsed' || e.type === 'error')).toEqual([]);
      // One claim for many agents was tried once; then each agent claimed on its own route.
      expect(old.counts.get('POST /v1/claim')).toBe(1);
      expect(old.counts.get('POST /v1/agents/:x/claim')).toBeGreaterThan(agents.length);
      expect(old.counts.get('POST /v1/executions/:x/heartbeat') ?? 0).toBeGreaterThan(0);
      if (missing.includes('POST /v1/completions')) expect(old.counts.get('POST /v1/completions') ?? 0).toBeLessThanOrEqual(1);
    }, 150_000);
  }

  it('a 404 naming an agent the server does not know stops the worker: no claims per agent', async () => {
    const old = await oldServer(node.url, []);
    const agents = ['gone-a', 'gone-b'];
    for (const a of agents) await api.createAgent({ name: a, max_parallel: 1, max_backlog: 10 });
    const w = createWorker({ server: old.url, key, agents, claimWaitSeconds: 1, handler: () => undefined });
    await w.start();
    try {
      await api.deleteAgent('gone-b');
      await until('the worker failed', () => w.failure !== undefined, 30_000);
      expect(w.failure).toMatchObject({ status: 404, code: 'not_found', body: { kind: 'agent', id: 'gone-b' } });
      expect(old.counts.get('POST /v1/agents/:x/claim')).toBeUndefined();
    } finally {
      await w.stop();
      await old.close();
    }
  }, 60_000);
});
