/**
 * A cut network between workers and the server while tasks run. A real `baton up` sits behind a
 * TCP proxy the test controls; an SDK worker and a `baton worker` process reach it only through
 * the proxy. The proxy is cut (every connection closed, new ones refused) for longer than a lease:
 * neither worker can renew, so each must abort its runs once their leases expire on its own clock
 * (the SDK handler's signal fires, the command's whole process group is killed) and report
 * nothing; the server reaps the leases and a third worker, connected directly, runs every task
 * again. Nothing is lost and each execution has one outcome: the re-run's.
 *
 * Figures are ordering and sizes from worker-side start/stop marks; the one bound on time (the
 * overlap of two runs of a task within lease TTL + one renewal interval) has generous slack.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import { LeaseKeeper, TaskAborted } from '../../src/domain/lease.ts';
import { createWorker, type Worker, type WorkerEvent } from '../../src/worker/sdk.ts';
import { groupGone, groupMembers, killGroup, until } from '../helpers/delivery.ts';
import { BATON_BIN, freePort, spawnChild, startBatonUp, type Child } from '../helpers/process.ts';
import { startProxy, type Proxy } from '../helpers/proxy.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const TTL_S = 2;
const TTL_MS = TTL_S * 1000;
const RENEW_MS = TTL_MS / 3;
/** Room for a loaded 2-core machine: process start-up, event-loop stalls, the reaper's interval. */
const SLACK_MS = 10_000;
/** Picked at start: from BATON_TEST_PORTS on a shared machine. */
const PORTS = { server: 0, proxy: 0 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('the lease keeper on its own clock', () => {
  it('aborts as lost once the lease expires unrenewed on the monotonic clock, not before', async () => {
    let mono = 0;
    let renewals = 0;
    let lapses = 0;
    const keeper = new LeaseKeeper({
      leaseTtlSeconds: 1,
      deadlineAt: null,
      monotonic: () => mono,
      renew: async () => {
        renewals++;
        throw new Error('unreachable');
      },
      isLeaseLost: () => false,
      onLapse: () => lapses++,
    });
    try {
      // Renewals fail, but on the keeper's clock no time has passed: the lease is still live.
      await until('failed renewals', () => renewals >= 3 || undefined, 30_000);
      expect(keeper.signal.aborted).toBe(false);
      mono = 1_000;
      await until('the lapse', () => keeper.signal.aborted || undefined, 30_000);
      expect((keeper.signal.reason as TaskAborted).reason).toBe('lease_lost');
      expect(keeper.lost && keeper.lapsed).toBe(true);
      expect(lapses).toBe(1);
    } finally {
      keeper.stop();
    }
  });

  it('a successful renewal moves the expiry to when it was sent', async () => {
    let mono = 0;
    let ok = true;
    let renewals = 0;
    const keeper = new LeaseKeeper({
      leaseTtlSeconds: 1,
      deadlineAt: null,
      monotonic: () => mono,
      renew: async () => {
        renewals++;
        if (!ok) throw new Error('unreachable');
        return { cancel_requested: false };
      },
      isLeaseLost: () => false,
    });
    try {
      mono = 900;
      const before = renewals;
      await until('a renewal', () => renewals > before || undefined, 30_000);
      await sleep(50);
      ok = false;
      mono = 1_800; // past the claim's expiry, within the renewal's (sent at 900)
      await sleep(1_500);
      expect(keeper.signal.aborted).toBe(false);
      mono = 1_900;
      await until('the lapse', () => keeper.signal.aborted || undefined, 30_000);
      expect(keeper.lapsed).toBe(true);
    } finally {
      keeper.stop();
    }
  });
});

describe('a cut network between workers and the server', () => {
  let ts: TestStore;
  let server: Child & { url: string };
  let proxy: Proxy;
  let api: BatonClient;
  let key: string;
  const dir = `/tmp/net-cut-${STORE_KIND}-${process.pid}`;
  const children: Child[] = [];
  const workers: Worker[] = [];
  const pgids: number[] = [];

  beforeAll(async () => {
    ts = await openTestStore();
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(join(dir, 'pids'), { recursive: true });
    PORTS.server = await freePort();
    do PORTS.proxy = await freePort();
    while (PORTS.proxy === PORTS.server);
    server = await startBatonUp({ ...ts.env, BATON_CANARY_INTERVAL_MS: '0' }, PORTS.server);
    children.push(server);
    proxy = await startProxy({ host: '127.0.0.1', port: PORTS.server }, PORTS.proxy);
    key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    api = new BatonClient({ server: server.url, key });
  }, 120_000);

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop().catch(() => undefined)));
    for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
    await Promise.all(children.map((c) => c.exited));
    for (const g of pgids) killGroup(g);
    await proxy?.close();
    await ts?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('aborts the runs whose leases lapsed, kills the command groups, and the re-runs are the only outcomes', async () => {
    await api.createAgent({ name: 'cut', max_parallel: 4, lease_ttl_seconds: TTL_S, max_redeliveries: 5 });
    const viaProxy = `http://127.0.0.1:${PORTS.proxy}`;

    // Worker-side marks, on this process's monotonic clock.
    const sdkStarts = new Map<string, number>();
    const sdkStops = new Map<string, { at: number; reason: string }>();
    const sdkEvents: WorkerEvent[] = [];
    const sdk = createWorker({
      server: viaProxy,
      key,
      agent: 'cut',
      concurrency: 2,
      workerId: 'sdk-behind-proxy',
      abortWaitMs: 1_000,
      onEvent: (e) => sdkEvents.push(e),
      handler: (task) =>
        new Promise((resolve) => {
          sdkStarts.set(task.executionId, performance.now());
          const done = () => {
            sdkStops.set(task.executionId, { at: performance.now(), reason: (task.signal.reason as TaskAborted).reason });
            resolve('the cut-off run');
          };
          if (task.signal.aborted) done();
          else task.signal.addEventListener('abort', done, { once: true });
        }),
    });
    workers.push(sdk);
    await sdk.start();

    // A command that ignores SIGTERM and leaves a child in its group: only SIGKILL of the group ends it.
    const script = `echo $$ > ${dir}/pids/$BATON_EXECUTION_ID; trap '' TERM; sleep 600 & wait; sleep 600`;
    const cli = spawnChild(
      [BATON_BIN, 'worker', '--agent', 'cut', '--concurrency', '2', '--kill-grace', '1', '--', '/bin/sh', '-c', script],
      { BATON_URL: viaProxy, BATON_API_KEY: key },
    );
    children.push(cli);

    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await api.submit('cut', { message: `job ${i}` })).execution_id);
    // Both workers hold two running tasks each.
    await until('four runs', () => (sdkStarts.size === 2 && readdirSync(join(dir, 'pids')).length === 2) || undefined, 60_000);
    const cliGroups = new Map<string, number>();
    for (const id of readdirSync(join(dir, 'pids'))) {
      const pgid = Number(readFileSync(join(dir, 'pids', id), 'utf8').trim());
      cliGroups.set(id, pgid);
      pgids.push(pgid);
    }
    await until('the command groups', () => [...cliGroups.values()].every((g) => groupMembers(g).length >= 2) || undefined, 30_000);

    await proxy.down();
    const cutAt = performance.now();

    // The re-runs: a worker that reaches the server directly.
    const rerunStarts = new Map<string, number>();
    const rerun = createWorker({
      server: server.url,
      key,
      agent: 'cut',
      concurrency: 4,
      workerId: 'direct',
      handler: (task) => {
        rerunStarts.set(task.executionId, performance.now());
        return { by: 'direct' };
      },
    });
    workers.push(rerun);
    await rerun.start();

    // Both kinds of run stop while the network is still cut; the command groups are gone.
    const cliGone = new Map<string, number>();
    await until(
      'the cut-off runs to stop',
      () => {
        // Stopped: no member left running (a killed orphan stays a zombie until init reaps it).
        for (const [id, g] of cliGroups)
          if (!cliGone.has(id) && groupMembers(g).every((m) => m.state === 'Z')) cliGone.set(id, performance.now());
        return (sdkStops.size === 2 && cliGone.size === 2) || undefined;
      },
      TTL_MS + RENEW_MS + SLACK_MS,
      50,
    );
    const done = await Promise.all(ids.map((id) => api.waitFor(id, { timeoutMs: 60_000 })));

    for (const s of sdkStops.values()) {
      expect(s.reason).toBe('lease_lost');
      expect(s.at - cutAt).toBeLessThan(TTL_MS + RENEW_MS + SLACK_MS);
    }
    for (const at of cliGone.values()) expect(at - cutAt).toBeLessThan(TTL_MS + RENEW_MS + SLACK_MS);
    for (const g of cliGroups.values()) expect(await groupGone(g)).toEqual([]);
    expect(
      sdkEvents
        .filter((e) => e.type === 'task:lapsed')
        .map((e) => (e as { executionId: string }).executionId)
        .sort(),
    ).toEqual([...sdkStarts.keys()].sort());

    // Every task was re-run after the reaper took it back; nothing lost, and the re-run's outcome is the one kept.
    expect(new Set([...sdkStarts.keys(), ...cliGroups.keys()])).toEqual(new Set(ids));
    for (const e of done) {
      expect(e.status).toBe('succeeded');
      expect(e.result).toEqual({ by: 'direct' });
    }
    expect(rerunStarts.size).toBe(4);
    // Overlap of two runs of one task: from the re-run's start to the cut-off run's stop.
    const stops = new Map<string, number>([...[...sdkStops].map(([id, s]) => [id, s.at] as const), ...cliGone]);
    for (const id of ids) {
      const overlap = stops.get(id)! - rerunStarts.get(id)!;
      expect(overlap).toBeLessThan(TTL_MS + RENEW_MS + SLACK_MS);
    }

    // The network comes back: the cut-off workers report nothing for their runs.
    await proxy.up();
    await sleep(2 * TTL_MS);
    await sdk.stop();
    cli.proc.kill('SIGTERM');
    expect(await cli.exited).toBe(0);
    expect(sdkEvents.filter((e) => e.type === 'task:end').every((e) => (e as { reported: string }).reported === 'lost')).toBe(true);
    for (const id of cliGroups.keys()) {
      expect(cli.output()).toContain(`${id} lease expired unrenewed`);
      expect(cli.output()).toContain(`${id} lease lost; not reported`);
      expect(cli.output()).not.toMatch(new RegExp(`${id} (succeeded|failed)`));
    }
    for (const e of await Promise.all(ids.map((id) => api.getExecution(id)))) {
      expect(e.status).toBe('succeeded');
      expect(e.result).toEqual({ by: 'direct' });
    }
  }, 180_000);
});
