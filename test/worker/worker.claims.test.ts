import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatonClient } from '../../src/client.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { createWorker } from '../../src/worker/sdk.ts';
import { startTestNode, until } from '../helpers/delivery.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

// How many claims the SDK sends: tasks that end together take their next tasks in one claim (with
// a completion, or one claim for every free slot), not one claim per slot. Counted by the server.
describe(`the worker's claims (${STORE_KIND})`, () => {
  let ts: TestStore;
  let node: BatonNode;
  let api: BatonClient;
  let key: string;
  beforeAll(async () => {
    ts = await openTestStore();
    ({ node, api, key } = await startTestNode(ts, { dispatcher: false }));
  });
  afterAll(async () => {
    await node?.stop();
    await ts?.cleanup();
  });

  /** Requests answered on `route` (a route pattern) with POST, from /metrics. */
  async function answered(route: string): Promise<number> {
    const text = await (await fetch(`${node.url}/metrics`)).text();
    let n = 0;
    for (const m of text.matchAll(/^baton_http_request_duration_seconds_count\{([^}]*)\} (\d+)/gm)) {
      if (m[1]!.includes(`route="${route}"`) && m[1]!.includes('method="POST"')) n += Number(m[2]);
    }
    return n;
  }

  it('bursts of 1 to 3 tasks to a worker of concurrency 3: one claim per burst, not one per task', async () => {
    const agent = 'claims-bursts';
    const C = 3;
    await api.createAgent({ name: agent, max_parallel: C, max_backlog: 100 });
    const sizes = Array.from({ length: 18 }, (_, i) => (i % C) + 1);
    const N = sizes.reduce((a, b) => a + b, 0);
    const claimsBefore = await answered('/v1/agents/:agent/claim');
    const completesBefore = await answered('/v1/executions/:id/complete');
    let now = 0;
    let most = 0;
    const seen: number[] = [];
    const w = createWorker({
      server: node.url,
      key,
      agent,
      concurrency: C,
      claimWaitSeconds: 5,
      handler(task) {
        most = Math.max(most, ++now);
        seen.push((task.payload as { i: number }).i);
        now--;
        return undefined;
      },
    });
    await w.start();
    let i = 0;
    try {
      for (const size of sizes) {
        const items = Array.from({ length: size }, () => ({ message: 't', payload: { i: i++ } }));
        expect((await api.submitMany(agent, items)).created).toBe(size);
        const want = i;
        // The burst is done (and reported) before the next one: the worker is idle between bursts.
        await until(`burst up to ${want} done`, () => seen.length === want && w.active === 0);
      }
    } finally {
      await w.stop();
    }
    expect(seen.sort((a, b) => a - b)).toEqual(Array.from({ length: N }, (_, k) => k));
    expect(most).toBeLessThanOrEqual(C);
    const rows = await ts.store.db.selectFrom('executions').select(['attempt', 'status']).where('agent', '=', agent).execute();
    expect(rows.length).toBe(N);
    expect(rows.every((r) => r.attempt === 1 && r.status === 'succeeded')).toBe(true);
    expect((await answered('/v1/executions/:id/complete')) - completesBefore).toBe(N);
    // Each burst reaches a claim parked for all three slots; after it, the completions claim once
    // (finding nothing) and the worker parks one claim for all three slots again. Per slot, it
    // would be one claim per task and more.
    const claims = (await answered('/v1/agents/:agent/claim')) - claimsBefore;
    expect(claims).toBeLessThanOrEqual(sizes.length + 1);
  });
});
