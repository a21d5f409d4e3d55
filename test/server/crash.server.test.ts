/**
 * Real SIGKILL of a `baton up` process on PostgreSQL in the middle of traffic, then a restart.
 * No recovery pass runs at start-up: whatever the kill interrupted is settled by leases and
 * the reaper, and every execution ends terminal or queued with nothing stuck running.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ApiError, BatonClient, Unreachable } from '../../src/client.ts';
import { isTerminal } from '../../src/domain/states.ts';
import { describeMultiProcess, openTestStore, type TestStore } from '../helpers/store.ts';
import { freePort, startBatonUp, type Child } from '../helpers/process.ts';
import { until } from '../helpers/proxy-front.ts';

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

describeMultiProcess('SIGKILL of baton up mid-traffic (PostgreSQL)', () => {
  it('restarts without a recovery pass; every execution ends terminal or queued, none stuck running', async () => {
    const port = await freePort();
    const env = { BATON_DATABASE_URL: ts.location.databaseUrl!, BATON_PG_SCHEMA: ts.location.schema!, BATON_DATA_DIR: ts.location.dataDir };
    let server = await startBatonUp(env, port);
    children.push(server);
    const key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    const api = new BatonClient({ server: server.url, key });
    await api.createAgent({ name: 'crashy', max_parallel: 4, max_backlog: 10_000, lease_ttl_seconds: 2 });

    let stop = false;
    const submitted: string[] = [];
    let transportErrors = 0;
    let claimed = 0;
    const tolerate = async (fn: () => Promise<void>) => {
      try {
        await fn();
      } catch (err) {
        if (err instanceof Unreachable || (err instanceof ApiError && err.status === 503)) {
          transportErrors++;
          await sleep(50);
        } else if (!(err instanceof ApiError && err.code === 'lease_lost')) throw err;
      }
    };
    const submitter = (async () => {
      while (!stop) await tolerate(async () => void submitted.push((await api.submit('crashy', { message: 'work' })).execution_id));
    })();
    const workers = Array.from({ length: 4 }, (_, w) =>
      (async () => {
        while (!stop) {
          await tolerate(async () => {
            const [task] = await api.claim('crashy', { wait_seconds: 0.5, worker_id: `w${w}` });
            if (!task) return;
            claimed++;
            await sleep(Math.random() * 20);
            await api.complete(task.execution_id, { lease_token: task.lease_token, status: 'succeeded' });
          });
        }
      })(),
    );

    // Killed once traffic is under way (submits made, tasks claimed), however fast the machine is.
    await until('submits and claims under way', () => submitted.length > 10 && claimed >= 4, 60_000);
    const before = submitted.length;
    server.proc.kill('SIGKILL');
    await server.exited;
    await until('traffic failing against the dead server', () => transportErrors > 0, 60_000);
    server = await startBatonUp(env, port);
    children.push(server);
    // Traffic carries on against the restarted server.
    const restarted = submitted.length;
    await until('submits to the restarted server', () => submitted.length > restarted + 10, 60_000);
    stop = true;
    await Promise.all([submitter, ...workers]);
    expect(before).toBeGreaterThan(10);
    expect(transportErrors).toBeGreaterThan(0);

    // Settle: let every lapsed lease (TTL 2 s) be found by the restarted server's reaper.
    const db = ts.store.db;
    const deadline = Date.now() + 20_000;
    let rows = await db.selectFrom('executions').selectAll().where('agent', '=', 'crashy').execute();
    while (rows.some((r) => r.status === 'running') && Date.now() < deadline) {
      await sleep(250);
      rows = await db.selectFrom('executions').selectAll().where('agent', '=', 'crashy').execute();
    }
    expect(rows.length).toBeGreaterThanOrEqual(submitted.length);
    // Every lease of the killed server lapsed and was handed back: nothing is left running.
    for (const r of rows) expect(isTerminal(r.status) || r.status === 'queued', `${r.id} is ${r.status}`).toBe(true);
    // The event log agrees with every row, and never shows more than the cap running.
    const events = await db.selectFrom('execution_events').selectAll().where('agent', '=', 'crashy').orderBy('id').execute();
    const last = new Map<string, string>();
    let running = 0;
    let peak = 0;
    for (const e of events) {
      if (e.to_status === 'running' && e.from_status !== 'running') running++;
      if (e.from_status === 'running' && e.to_status !== 'running') running--;
      peak = Math.max(peak, running);
      if (e.from_status) expect(isTerminal(e.from_status), `event ${e.id} leaves terminal ${e.from_status}`).toBe(false);
      last.set(e.execution_id, e.to_status);
    }
    expect(peak).toBeLessThanOrEqual(4);
    for (const r of rows) expect(last.get(r.id)).toBe(r.status);

    server.proc.kill('SIGTERM');
    expect(await server.exited).toBe(0);
  });
});
