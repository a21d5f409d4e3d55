/**
 * SIGKILL of the `baton up` process that is dispatching a push request (real child processes,
 * PostgreSQL): its lease lapses, the reaper re-queues the execution, and another process
 * delivers it again with the same Idempotency-Key and the next attempt number.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import { until } from '../helpers/delivery.ts';
import { freePort, startBatonUp, type Child } from '../helpers/process.ts';
import { describeMultiProcess, openTestStore, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
const children: Child[] = [];
const server = createServer();

beforeAll(async () => {
  ts = await openTestStore();
});
afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
  await Promise.all(children.map((c) => c.exited));
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  await ts.cleanup();
});

describeMultiProcess('push delivery survives the death of the dispatching process (PostgreSQL)', () => {
  it('re-delivers with the same Idempotency-Key and attempt 2', async () => {
    // The agent holds the first request open (the dispatcher is mid-request when it dies) and
    // answers the second.
    const requests: Array<{ key: string; attempt: string; body: any; res: ServerResponse; req: IncomingMessage }> = [];
    server.on('request', (req, res) => {
      let raw = '';
      req.on('data', (c) => (raw += c));
      req.on('end', () => {
        requests.push({
          key: String(req.headers['idempotency-key']),
          attempt: String(req.headers['x-baton-attempt']),
          body: JSON.parse(raw),
          res,
          req,
        });
        if (requests.length > 1) {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ status: 'succeeded', result: { delivery: requests.length } }));
        }
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/task`;

    const env = { BATON_DATABASE_URL: ts.location.databaseUrl!, BATON_PG_SCHEMA: ts.location.schema!, BATON_DATA_DIR: ts.location.dataDir };
    const first = await startBatonUp(env, await freePort());
    children.push(first);
    const key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    const api = new BatonClient({ server: first.url, key });
    await api.createAgent({ name: 'pushy', delivery: 'push', push_url: url, lease_ttl_seconds: 2 });
    const { execution_id } = await api.submit('pushy', { message: 'deliver me' });

    await until('the first delivery', () => requests.length === 1);
    expect((await api.getExecution(execution_id)).status).toBe('running');
    first.proc.kill('SIGKILL');
    await first.exited;

    const second = await startBatonUp(env, await freePort());
    children.push(second);
    const api2 = new BatonClient({ server: second.url, key });
    const e = await api2.waitFor(execution_id, { timeoutMs: 30_000, intervalMs: 200 });

    expect(e.status).toBe('succeeded');
    expect(e.result).toEqual({ delivery: 2 });
    expect(e.attempt).toBe(2);
    expect(requests).toHaveLength(2);
    expect(requests.map((r) => r.key)).toEqual([execution_id, execution_id]);
    expect(requests.map((r) => r.attempt)).toEqual(['1', '2']);
    expect(requests.map((r) => r.body.execution_id)).toEqual([execution_id, execution_id]);
    expect(e.events.map((ev) => ev.reason)).toEqual(expect.arrayContaining(['admitted', 'requeued', 'succeeded']));

    second.proc.kill('SIGTERM');
    expect(await second.exited).toBe(0);
  });
});
