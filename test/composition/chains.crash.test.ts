/**
 * Chains under SIGKILL: a real `baton up` child completes sources (through workers calling its
 * HTTP API) while it is SIGKILLed at random moments and restarted. A chained task commits with
 * its source's completion or not at all, so afterwards every succeeded source has exactly one
 * chained task per matching subscription (and one link row), and every chained task's source is
 * terminal. Both stores.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError, BatonClient, Unreachable } from '../../src/client.ts';
import { isTerminal } from '../../src/domain/states.ts';
import { freePort, startBatonUp, type Child } from '../helpers/process.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const SOURCES = 60;
const KILLS = 3;

let ts: TestStore;
const children: Child[] = [];

beforeAll(async () => {
  ts = await openTestStore();
});
afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
  await Promise.all(children.map((c) => c.exited));
  await ts.cleanup();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe(`chains across SIGKILL of baton up (${STORE_KIND})`, () => {
  it('every succeeded source has exactly one chained task per subscription; every chained task’s source is terminal', async () => {
    const port = await freePort();
    const env: Record<string, string> = { ...ts.env, BATON_CANARY_INTERVAL_MS: '0' };
    let server = await startBatonUp(env, port);
    children.push(server);
    const key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    const api = new BatonClient({ server: server.url, key });
    await api.createAgent({ name: 'crash-src', max_parallel: 4, max_backlog: 1_000, lease_ttl_seconds: 2, max_redeliveries: 50 });
    await api.createAgent({ name: 'crash-dst', max_parallel: 1, max_backlog: 1_000 });
    await api.createAgent({ name: 'crash-any', max_parallel: 1, max_backlog: 1_000 });
    const onSuccess = await api.createSubscription({
      source_agent: 'crash-src',
      target_agent: 'crash-dst',
      on: 'succeeded',
      message: 'after {{source.id}}',
    });
    const onAny = await api.createSubscription({
      source_agent: 'crash-src',
      target_agent: 'crash-any',
      on: 'any',
      message: '{{source.status}}',
      payload: { n: '{{source.result#/n}}' },
    });
    for (let i = 0; i < SOURCES; i++) await api.submit('crash-src', { message: `source ${i}` });

    let stop = false;
    let transportErrors = 0;
    let completions = 0;
    const tolerate = async (fn: () => Promise<void>) => {
      try {
        await fn();
      } catch (err) {
        if (err instanceof Unreachable || (err instanceof ApiError && err.status === 503)) {
          transportErrors++;
          await sleep(50);
        } else if (!(err instanceof ApiError && (err.code === 'lease_lost' || err.code === 'invalid_transition'))) throw err;
      }
    };
    const workers = Array.from({ length: 3 }, (_, w) =>
      (async () => {
        while (!stop) {
          await tolerate(async () => {
            const [task] = await api.claim('crash-src', { wait_seconds: 0.3, worker_id: `w${w}` });
            if (!task) return;
            await sleep(Math.random() * 15);
            await api.complete(task.execution_id, { lease_token: task.lease_token, status: 'succeeded', result: { n: w } });
            completions++;
          });
        }
      })(),
    );

    for (let k = 0; k < KILLS; k++) {
      await sleep(200 + Math.random() * 600);
      server.proc.kill('SIGKILL');
      await server.exited;
      await sleep(100);
      server = await startBatonUp(env, port);
      children.push(server);
    }

    // Drain: lapsed leases (TTL 2 s) come back through the restarted server's reaper.
    const db = ts.store.db;
    const succeededSources = async () =>
      Number(
        (
          await db
            .selectFrom('executions')
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .where('agent', '=', 'crash-src')
            .where('status', '=', 'succeeded')
            .executeTakeFirstOrThrow()
        ).n,
      );
    const deadline = Date.now() + 90_000;
    while ((await succeededSources()) < SOURCES && Date.now() < deadline) await sleep(250);
    stop = true;
    await Promise.all(workers);
    server.proc.kill('SIGTERM');
    expect(await server.exited).toBe(0);
    expect(transportErrors, 'the kills interrupted traffic').toBeGreaterThan(0);
    expect(completions).toBeGreaterThan(0);

    const sources = await db.selectFrom('executions').selectAll().where('agent', '=', 'crash-src').execute();
    expect(sources).toHaveLength(SOURCES);
    expect(sources.every((s) => s.status === 'succeeded')).toBe(true);
    const chained = await db.selectFrom('executions').selectAll().where('trigger_kind', '=', 'chain').execute();
    const links = await db.selectFrom('chain_links').selectAll().execute();
    const byId = new Map(sources.map((s) => [s.id, s]));
    for (const s of sources) {
      for (const sub of [onSuccess.id, onAny.id]) {
        const tasks = chained.filter((c) => c.caused_by === s.id && c.subscription_id === sub);
        expect(tasks, `source ${s.id}, subscription ${sub}`).toHaveLength(1);
        expect(links.filter((l) => l.source_id === s.id && l.subscription_id === sub)).toEqual([
          expect.objectContaining({ execution_id: tasks[0]!.id, refused: null }),
        ]);
      }
    }
    expect(chained).toHaveLength(2 * SOURCES);
    for (const c of chained) {
      const source = byId.get(c.caused_by!);
      expect(source, `the source of ${c.id}`).toBeDefined();
      expect(isTerminal(source!.status)).toBe(true);
      // Created in the completing transaction: the same instant as the source's completion.
      expect(c.created_at).toBe(source!.completed_at);
      if (c.agent === 'crash-any') expect(JSON.parse(c.payload)).toEqual(JSON.parse(source!.result!));
    }
  }, 180_000);
});
