/**
 * One worker SDK serving many agents, in a process of its own, against a real server: one claim
 * loop for all of them (POST /v1/claim), widened when an agent that it does not ask for gets a
 * free slot (withdrawn when the widening did not take). Many tasks in waves: every task succeeds once, at its first attempt; no agent ran
 * above its cap or the worker's concurrency; and no lease lapsed. A task leased to an answer the
 * worker never read can only succeed after the reaper re-queues it (attempt 2, the reaper runs every
 * 200 ms), so a lost task shows as an attempt and a reaped row, not as time.
 *
 * The lease TTL is 15 s (MANY_LEASE_TTL sets it). With 5 s, on PostgreSQL at a load average of
 * about 20 on 2 cores (2026-12-07, 17:51-17:57 UTC, at 4bffaa8 + this fixture's diagnosis), one
 * run of four had 45 of 600 tasks reaped and run again (attempt 2) while the worker saw no lapse:
 * its event loop's worst delay was 150-220 ms and no heartbeat failed, so the renewal timer was
 * neither starved nor late. It never ran: a task holds its slot 0-20 ms, and the SDK then renewed a
 * lease from when the claim's answer arrived until the handler returned, a third of the TTL at the
 * earliest. What the lease spent was the server's and the transport's time either side of that:
 * up to 1.8 s from the server's lease start to the handler starting (the claim's answer on its
 * way) and up to 3.7 s from the handler's return to its completion answered (the completion
 * batched behind the batch in flight), together more than 5 s. The child prints these figures
 * each run (`many agents (<store>): {…}`, `claimToStartMs`, `returnToAnsweredMs`). At 15 s all
 * four runs passed, but at a load average of 34-37 (17:58-18:01 UTC) the two reached 8.2 s and
 * 9.2 s on PostgreSQL (3.5 s and 6.9 s in the next run). Since then the SDK keeps renewing after
 * the handler returns until its completion is answered (src/worker/sdk.ts, LeaseKeeper.workDone;
 * test/worker/worker.slow-completion.test.ts), so only the claim's answer on its way is unrenewed.
 * The test does not judge the server's slowness.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatonClient } from '../../src/client.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { startTestNode, until } from '../helpers/delivery.ts';
import { spawnFixture } from '../helpers/processes.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const AGENTS = 60;
const TASKS = 600;
const CONCURRENCY = 2;
const LEASE_TTL_S = Number(process.env.MANY_LEASE_TTL ?? 15);

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

describe(`one worker process serving ${AGENTS} agents (${STORE_KIND})`, () => {
  it('runs every task once within each cap, with one claim loop, and no lease lapses', async () => {
    const agents = Array.from({ length: AGENTS }, (_, i) => `many-${i}`);
    // Odd agents are capped below the worker's concurrency: the server's cap binds, not the worker's.
    const cap = (i: number) => (i % 2 === 0 ? 2 : 1);
    for (const [i, name] of agents.entries())
      await api.createAgent({ name, max_parallel: cap(i), max_backlog: TASKS, lease_ttl_seconds: LEASE_TTL_S, timeout_seconds: 600 });
    let reaped = 0;
    node.engine.events.on('reaper:reaped', (rows) => (reaped += rows.length));

    const child = spawnFixture(
      'many-agents-worker',
      ['--server', node.url, '--key', key, '--agents', agents.join(','), '--concurrency', String(CONCURRENCY), '--timeout-s', '600'],
      {},
    );
    try {
      await child.line((l) => l === 'ready', 60_000);
      // Waves with pauses, so the claim parks between them and agents fill and free while it is out.
      for (let sent = 0; sent < TASKS;) {
        const wave = Math.min(TASKS - sent, 1 + Math.floor(Math.random() * 80));
        await Promise.all(Array.from({ length: wave }, (_, k) => api.submit(agents[(sent + k) % AGENTS]!, { message: `t${sent + k}` })));
        sent += wave;
        await new Promise((r) => setTimeout(r, Math.random() * 30));
      }
      await until(
        'every task succeeded',
        async () => {
          const rows = await ts.store.db
            .selectFrom('executions')
            .select('status')
            .where('agent', 'in', agents)
            .where('status', '=', 'succeeded')
            .execute();
          return rows.length === TASKS || undefined;
        },
        150_000,
        200,
      );
      child.proc.stdin!.write('stop\n');
      const summary = JSON.parse(await child.line((l) => l.startsWith('{'), 60_000)) as {
        started: number;
        most: Record<string, number>;
        lapsed: string[];
        errors: unknown[];
        diagnosis: unknown;
      };
      console.log(`many agents (${STORE_KIND}): ${JSON.stringify(summary.diagnosis)}`);
      const rows = await ts.store.db.selectFrom('executions').select(['attempt', 'status']).where('agent', 'in', agents).execute();
      expect(rows.length).toBe(TASKS);
      expect(rows.filter((r) => r.status !== 'succeeded' || r.attempt !== 1)).toEqual([]);
      expect(summary.started).toBe(TASKS);
      expect(summary.lapsed, JSON.stringify(summary.diagnosis)).toEqual([]);
      expect(summary.errors).toEqual([]);
      expect(reaped).toBe(0);
      for (const [i, name] of agents.entries()) expect(summary.most[name] ?? 0, name).toBeLessThanOrEqual(Math.min(cap(i), CONCURRENCY));
      // The worker claimed through the one route for many agents. Whether it widened a claim here
      // hangs on timing (an agent at the worker's limit freeing while a claim is parked), so it is
      // not asserted: test/worker/worker.widen.test.ts makes that happen and checks it.
      const metrics = await (await fetch(`${node.url}/metrics`, { headers: { authorization: `Bearer ${key}` } })).text();
      const hits = (route: string) =>
        metrics
          .split('\n')
          .filter((l) => l.includes(`route="${route}"`) && !l.startsWith('#') && l.includes('_count'))
          .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
      expect(hits('/v1/claim')).toBeGreaterThan(0);
      expect(hits('/v1/agents/:agent/claim')).toBe(0);
    } finally {
      child.proc.kill('SIGKILL');
      await child.exit(10_000);
    }
  }, 180_000);
});
