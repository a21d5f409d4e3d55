/**
 * Failover, as Patroni or a managed service does it: a primary with a synchronous streaming
 * standby, Baton given both hosts in BATON_DATABASE_URL (target_session_attrs=read-write), the
 * primary killed (`pg_ctl stop -m immediate`) while submits go on and the standby promoted
 * (`pg_ctl promote`). Baton must serve again by itself on the new primary (submits and claims),
 * with no change to its URL, and every submit acknowledged before the kill must be there.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { until } from '../helpers/delivery.ts';
import { query, replicateTo, startPgCluster, startPgStandby, type PgCluster } from '../helpers/pg-cluster.ts';
import { freePort } from '../helpers/process.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { STORE_KIND, untilHearing } from '../helpers/store.ts';

const describeFailover = STORE_KIND === 'postgres' ? describe : describe.skip;

describeFailover('PostgreSQL failover (a SQLite store is one file with no standby: nothing to fail over to)', () => {
  let work: string;
  let primary: PgCluster;
  let standby: PgCluster;
  let node: BatonNode;
  let api: BatonClient;
  /** Two more processes' stores on the same URL: one listening since before the kill, one to notify it. */
  let listener: StoreAdapter;
  let sender: StoreAdapter;

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'baton-failover-'));
    // The clusters run as the postgres user: it must be able to enter the directory.
    chmodSync(work, 0o755);
    primary = startPgCluster({ dataDir: join(work, 'a'), workDir: join(work, 'a-work'), port: await freePort() });
    standby = startPgStandby({
      primaryPort: primary.port,
      dataDir: join(work, 'b'),
      workDir: join(work, 'b-work'),
      port: await freePort(),
    });
    // Synchronous from here: a commit is acknowledged once the standby has it too.
    await replicateTo(primary.url, 'sync');
    const both = `postgres://postgres@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/test?target_session_attrs=read-write`;
    node = await startNode({
      env: { dataDir: work, databaseUrl: both, port: 0, host: '127.0.0.1' },
      logger: pino({ level: 'silent' }),
      canaryIntervalMs: 0,
      dispatcher: false,
      pruner: false,
    });
    api = new BatonClient({ server: node.url, key: node.createdAdminKey! });
    await api.createAgent({ name: 'failover', max_backlog: 1_000_000 });
    listener = openPostgres({ url: both, poolMax: 2 });
    sender = openPostgres({ url: both, poolMax: 2 });
    // Subscribed across the kill, so the listener's own reconnecting (not a fresh start) is what must find the new primary.
    listener.subscribe('agent', () => {});
    await untilHearing(listener, sender);
  }, 120_000);
  afterAll(async () => {
    await listener?.close();
    await sender?.close();
    await node?.stop();
    primary?.stop();
    standby?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('serves again on the promoted standby by itself, with every acknowledged submit there', async () => {
    const acked = new Set<string>();
    let refused = 0;
    let stop = false;
    let next = 0;
    const submitter = async () => {
      while (!stop) {
        try {
          const e = await api.submit('failover', { message: `task ${next++}` });
          acked.add(e.execution_id);
        } catch {
          // Refused while no host takes writes: not acknowledged, so nothing is owed.
          refused++;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    };
    const submitters = [submitter(), submitter()];
    await until('some submits acknowledged on the first primary', () => acked.size >= 20);
    const before = [...acked];
    const claimed = await api.claim('failover', { wait_seconds: 0 });
    expect(claimed).toHaveLength(1);

    primary.kill();
    const ackedAtKill = acked.size;
    // While only a standby answers, Baton refuses writes rather than writing anywhere else.
    await until('submits refused with no primary', () => refused > 0);
    await standby.promote();
    await until('a submit acknowledged on the promoted standby', () => acked.size > ackedAtKill + 5, 60_000);
    stop = true;
    await Promise.all(submitters);

    // The lease granted on the old primary holds on the new one (the claim was replicated before
    // it was answered), and claims work there, through the same URL.
    let lastError: unknown;
    const done = await until('the first claim completed on the new primary', async () => {
      try {
        return await api.complete(claimed[0]!.execution_id, { lease_token: claimed[0]!.lease_token, status: 'succeeded' });
      } catch (err) {
        lastError = err;
        return undefined;
      }
    }).catch((err) => Promise.reject(new Error(`${(err as Error).message}: ${String(lastError)}`)));
    expect(done.status).toBe('succeeded');
    const after = await until('a claim on the new primary', async () => {
      try {
        const tasks = await api.claim('failover', { wait_seconds: 0 });
        return tasks.length > 0 ? tasks : undefined;
      } catch (err) {
        lastError = err;
        return undefined;
      }
    }).catch((err) => Promise.reject(new Error(`${(err as Error).message}: ${String(lastError)}`)));
    expect(after[0]!.execution_id).not.toBe(claimed[0]!.execution_id);

    // The LISTEN connection opened on the old primary found the new one by itself: another process's NOTIFY reaches it.
    await untilHearing(listener, sender);

    // Every acknowledged submit (before the kill and after) is on the new primary.
    const rows = await query<{ id: string }>(standby.url, 'SELECT id FROM executions');
    const there = new Set(rows.map((r) => r.id));
    expect(before.filter((id) => !there.has(id))).toEqual([]);
    expect([...acked].filter((id) => !there.has(id))).toEqual([]);
  }, 120_000);
});
