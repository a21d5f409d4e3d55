/**
 * The worker SDK serving several agents keeps its one claim parked when an agent that the claim
 * left out gets a free slot: it adds that agent to the claim (POST /v1/claim/widen) instead of
 * withdrawing it and claiming again, so no submit meets the worker with no claim parked. A real
 * server behind a counting proxy (test/helpers/old-server.ts), a worker for two agents capped at
 * 1: a task of one agent runs (the claim out now asks for the other alone), completes, and the
 * next task of that agent is answered by that same claim, widened, with no withdrawal and no new
 * claim between. Against a server without the route (older than the SDK) the worker withdraws
 * and claims again, as before, and tries the route no more.
 */
import { describe, expect, it } from 'vitest';
import type { BatonClient } from '../../src/client.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { createWorker, type WorkerEvent } from '../../src/worker/sdk.ts';
import { testNodeHooks, until } from '../helpers/delivery.ts';
import { oldServer } from '../helpers/old-server.ts';
import { STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let node: BatonNode;
let api: BatonClient;
let key: string;

testNodeHooks((t) => ({ ts, node, api, key } = t));

const settle = () => new Promise((r) => setTimeout(r, 400));

describe(`the worker widens its claim for an agent it left out (${STORE_KIND})`, () => {
  for (const widens of [true, false]) {
    it(
      widens ? 'widens the parked claim: no withdrawal, no new claim' : 'against a server without the route: withdraws and claims again',
      async () => {
        const old = await oldServer(node.url, widens ? [] : ['POST /v1/claim/widen']);
        const agents = [`wd${+widens}-a`, `wd${+widens}-b`];
        for (const a of agents) await api.createAgent({ name: a, max_parallel: 1, max_backlog: 10 });
        const started: string[] = [];
        const events: WorkerEvent[] = [];
        const w = createWorker({
          server: old.url,
          key,
          agents,
          concurrency: 1,
          claimWaitSeconds: 30,
          handler: (task) => void started.push(task.executionId),
          onEvent: (e) => void events.push(e),
        });
        const n = (route: string) => old.counts.get(route) ?? 0;
        await w.start();
        try {
          await until('the claim is out', () => n('POST /v1/claim') === 1, 10_000);
          await settle();
          for (let round = 0; round < 3; round++) {
            // The claim out asks for agent a (free) and b; a task of a runs and completes.
            const first = await api.submit(agents[0]!, { message: `first ${round}` });
            await until('it ran', () => started.includes(first.execution_id), 10_000);
            await until('it was reported', async () => (await api.getExecution(first.execution_id)).status === 'succeeded', 10_000);
            await settle();
            const claims = n('POST /v1/claim');
            const next = await api.submit(agents[0]!, { message: `next ${round}` });
            await until('the next ran', () => started.includes(next.execution_id), 10_000);
            await until('it was reported', async () => (await api.getExecution(next.execution_id)).status === 'succeeded', 10_000);
            await settle();
            if (widens) {
              // The claim that took `next` was out before it was submitted: a's slot was added to it.
              expect(n('POST /v1/claim'), `round ${round}`).toBe(claims + 1);
              expect(n('POST /v1/claim/widen')).toBe(2 * (round + 1));
              expect(n('POST /v1/claim/withdraw')).toBe(0);
            } else {
              expect(n('POST /v1/claim/widen')).toBe(1); // tried once, then never again
              expect(n('POST /v1/claim/withdraw')).toBeGreaterThanOrEqual(2 * (round + 1));
            }
          }
        } finally {
          await w.stop();
          await old.close();
        }
        expect(w.failure).toBeUndefined();
        expect(events.filter((e) => e.type === 'task:lapsed' || e.type === 'error' || e.type === 'transport:error')).toEqual([]);
        const rows = await ts.store.db.selectFrom('executions').select(['attempt', 'status']).where('agent', 'in', agents).execute();
        expect(rows.length).toBe(6);
        expect(rows.filter((r) => r.status !== 'succeeded' || r.attempt !== 1)).toEqual([]);
      },
      90_000,
    );
  }
});
