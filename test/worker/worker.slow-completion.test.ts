/**
 * A completion answered later than the lease lasts. A real `baton up` sits behind an HTTP proxy
 * that holds every completion (POST /v1/completions and the single route) for several lease
 * TTLs before passing it on, as a loaded machine does to a completion queued behind a batch of others;
 * everything else passes at once. The SDK worker must keep the lease renewed from the handler's
 * return until its completion is answered: no task is reaped and run again, and each keeps the
 * outcome of its first and only run (attempt 1, succeeded, the worker's result).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import { LeaseKeeper } from '../../src/domain/lease.ts';
import { createWorker, type Worker, type WorkerEvent } from '../../src/worker/sdk.ts';
import { freePort, startBatonUp, type Child } from '../helpers/process.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';

/**
 * A short lease (the API allows 1 s), with room for a renewal answered late on a loaded machine:
 * the test must fail only for want of renewals after the handler's return.
 */
const TTL_S = 2;
/** How long the proxy holds a completion: past the lease and the reaper's next pass (2 s ± 20 %). */
const HOLD_MS = 9_000;
const TASKS = 4;

const isCompletion = (req: http.IncomingMessage) =>
  req.method === 'POST' && (req.url === '/v1/completions' || /^\/v1\/executions\/[^/]+\/complete$/.test(req.url ?? ''));

/**
 * An HTTP proxy to `target` that passes each completion on `holdMs` after it arrived (its whole
 * body read first), as a completion that waits in the worker behind others reaches the server late.
 */
async function startHoldingProxy(target: number, port: number, holdMs: number) {
  const agent = new http.Agent({ keepAlive: true });
  let held = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const forward = () => {
        const up = http.request(
          { host: '127.0.0.1', port: target, method: req.method, path: req.url, headers: req.headers, agent },
          (answer) => {
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(res);
          },
        );
        up.on('error', () => res.destroy());
        up.end(Buffer.concat(chunks));
      };
      if (!isCompletion(req)) return forward();
      held++;
      setTimeout(forward, holdMs);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get held() {
      return held;
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      agent.destroy();
    },
  };
}

describe('the lease keeper once the work returned', () => {
  it('renews until stopped; nothing lapses or aborts, and a lost lease only ends the renewals', async () => {
    let mono = 0;
    let renewals = 0;
    let answer: 'ok' | 'cancel' | 'unreachable' | 'lost' = 'ok';
    let lapses = 0;
    const keeper = new LeaseKeeper({
      leaseTtlSeconds: 1,
      deadlineAt: Date.now() + 500,
      monotonic: () => mono,
      renew: async () => {
        renewals++;
        if (answer === 'unreachable') throw new Error('unreachable');
        if (answer === 'lost') throw new Error('lease_lost');
        return { cancel_requested: answer === 'cancel' };
      },
      isLeaseLost: (err) => (err as Error).message === 'lease_lost',
      onLapse: () => lapses++,
    });
    const signal = keeper.signal;
    const waitRenewals = async (n: number) => {
      const from = renewals;
      while (renewals < from + n) await new Promise((r) => setTimeout(r, 20));
    };
    try {
      keeper.workDone();
      answer = 'cancel';
      await waitRenewals(2); // past the deadline too
      answer = 'unreachable';
      mono = 10_000; // far past the lease's expiry on the keeper's clock
      await waitRenewals(2);
      expect(signal.aborted).toBe(false);
      expect(keeper.reason).toBeUndefined();
      expect(lapses).toBe(0);
      expect(keeper.lapsed || keeper.lost).toBe(false);
      answer = 'lost';
      await waitRenewals(1);
      await new Promise((r) => setTimeout(r, 1_000)); // three more intervals: no renewal
      expect(keeper.lost).toBe(true);
      expect(signal.aborted).toBe(false);
      const after = renewals;
      await new Promise((r) => setTimeout(r, 700));
      expect(renewals).toBe(after);
    } finally {
      keeper.stop();
    }
  }, 60_000);
});

describe('a completion answered later than the lease lasts', () => {
  let ts: TestStore;
  let server: Child & { url: string };
  let proxy: Awaited<ReturnType<typeof startHoldingProxy>>;
  let api: BatonClient;
  let key: string;
  const workers: Worker[] = [];

  beforeAll(async () => {
    ts = await openTestStore();
    const serverPort = await freePort();
    let proxyPort: number;
    do proxyPort = await freePort();
    while (proxyPort === serverPort);
    server = await startBatonUp({ ...ts.env, BATON_CANARY_INTERVAL_MS: '0' }, serverPort);
    proxy = await startHoldingProxy(serverPort, proxyPort, HOLD_MS);
    key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    api = new BatonClient({ server: server.url, key });
  }, 120_000);

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop().catch(() => undefined)));
    await proxy?.close();
    if (server && server.proc.exitCode === null && server.proc.signalCode === null) server.proc.kill('SIGKILL');
    await server?.exited;
    await ts?.cleanup();
  });

  it('keeps the lease renewed until the completion is answered: no task is reaped or run twice', async () => {
    await api.createAgent({ name: 'slow-ack', max_parallel: TASKS, lease_ttl_seconds: TTL_S, max_redeliveries: 5 });
    const runs = new Map<string, number[]>();
    const events: WorkerEvent[] = [];
    const worker = createWorker({
      server: proxy.url,
      key,
      agent: 'slow-ack',
      concurrency: TASKS,
      workerId: 'behind-slow-proxy',
      onEvent: (e) => events.push(e),
      handler: (task) => {
        runs.set(task.executionId, [...(runs.get(task.executionId) ?? []), task.attempt]);
        return { by: 'behind-slow-proxy', attempt: task.attempt };
      },
    });
    workers.push(worker);
    await worker.start();

    const ids: string[] = [];
    for (let i = 0; i < TASKS; i++) ids.push((await api.submit('slow-ack', { message: `job ${i}` })).execution_id);
    const done = await Promise.all(ids.map((id) => api.waitFor(id, { timeoutMs: 90_000 })));
    await worker.stop();

    expect(proxy.held).toBeGreaterThan(0);
    for (const e of done) {
      expect(e.status).toBe('succeeded');
      expect(e.attempt).toBe(1);
      expect(e.result).toEqual({ by: 'behind-slow-proxy', attempt: 1 });
    }
    for (const id of ids) expect(runs.get(id)).toEqual([1]);
    const ends = events.filter((e) => e.type === 'task:end') as Array<{ executionId: string; reported: string; status: string }>;
    expect(ends.map((e) => [e.executionId, e.reported, e.status]).sort()).toEqual(ids.map((id) => [id, 'completed', 'succeeded']).sort());
    expect(events.filter((e) => e.type === 'task:lapsed')).toEqual([]);
  }, 180_000);
});
