/**
 * A full disk is weather too: while the database's disk has no room, writes answer 503 and
 * change nothing, /readyz answers 503 `store_full` (a load balancer stops sending traffic),
 * /metrics counts it and the log says it once per interval; when space returns a probe write (a MiB,
 * at most once a second while full) clears it by itself. The disk is real: a small tmpfs holding the SQLite file, or the data
 * directory of a PostgreSQL cluster of the test's own (its WAL on the ordinary disk, as on a
 * server with a separate WAL volume, so the data files are what cannot grow: 53100 disk_full).
 * It is filled by submits over HTTP, then grown; every acknowledged submit must be there after.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { until } from '../helpers/delivery.ts';
import { startPgCluster, type PgCluster } from '../helpers/pg-cluster.ts';
import { freePort } from '../helpers/process.ts';
import { STORE_KIND } from '../helpers/store.ts';
import { describeWithTmpfs, mountTmpfs, type Tmpfs } from '../helpers/tmpfs.ts';

const MiB = 1024 * 1024;
/** Room left on the filesystem once the store is set up: filled in a few hundred submits. */
const HEADROOM = 4 * MiB;
/** Refusals for lack of space seen before the disk is called full. */
const REFUSALS = 20;

describeWithTmpfs('a full disk', () => {
  let disk: Tmpfs;
  let work: string;
  let cluster: PgCluster | undefined;
  let node: BatonNode;
  let api: BatonClient;
  let key: string;
  const lines: Array<{ msg: string; level: number }> = [];

  beforeAll(async () => {
    disk = mountTmpfs('baton-full-', 256 * MiB);
    work = mkdtempSync(join(tmpdir(), 'baton-full-work-'));
    // The cluster runs as the postgres user: it must be able to enter the directory.
    chmodSync(work, 0o755);
    let databaseUrl: string | undefined;
    if (STORE_KIND === 'postgres') {
      cluster = startPgCluster({ dataDir: join(disk.dir, 'pg'), workDir: join(work, 'pg'), port: await freePort() });
      databaseUrl = cluster.url;
    }
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    node = await startNode({
      env: { dataDir: databaseUrl ? work : disk.dir, databaseUrl, port: 0, host: '127.0.0.1' },
      logger,
      canaryIntervalMs: 0,
      dispatcher: false,
      pruner: false,
    });
    key = node.createdAdminKey!;
    api = new BatonClient({ server: node.url, key });
    await api.createAgent({ name: 'filler', max_backlog: 1_000_000 });
    disk.resize(disk.used() + HEADROOM);
  }, 120_000);
  afterAll(async () => {
    await node?.stop();
    cluster?.stop();
    disk?.unmount();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  const get = (path: string) => fetch(node.url + path, { headers: { authorization: `Bearer ${key}` } });
  const submit = (i: number) =>
    fetch(`${node.url}/v1/agents/filler/executions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ message: `task ${i}`, payload: { i, pad: randomBytes(24 * 1024).toString('base64') } }),
    });
  const metric = async (name: string) => {
    const text = await (await get('/metrics')).text();
    const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
    return m ? Number(m[1]) : undefined;
  };

  it('answers 503 store_full while full, loses no acknowledged submit, and resumes when space returns', async () => {
    expect((await fetch(node.url + '/readyz')).status).toBe(200);
    expect(await metric('baton_store_full')).toBe(0);

    // Four submitters until the disk has refused REFUSALS of them.
    const started = Date.now();
    const acked = new Map<string, number>();
    let refused = 0;
    let next = 0;
    const submitter = async () => {
      while (refused < REFUSALS) {
        const i = next++;
        if (i > 20_000) throw new Error('the disk never filled');
        const r = await submit(i);
        const body = (await r.json()) as { execution_id?: string; error?: string; message?: string };
        if (r.status === 201) acked.set(body.execution_id!, i);
        else {
          expect(r.status, JSON.stringify(body)).toBe(503);
          expect(body).toMatchObject({ error: 'unavailable', message: expect.stringContaining('disk is full') });
          expect(r.headers.get('retry-after')).toMatch(/^\d+$/);
          refused++;
        }
      }
    };
    await Promise.all([submitter(), submitter(), submitter(), submitter()]);
    expect(acked.size).toBeGreaterThan(0);

    const full = await fetch(node.url + '/readyz');
    expect(full.status).toBe(503);
    expect(await full.json()).toMatchObject({ status: 'store_full', error: 'unavailable' });
    expect((await fetch(node.url + '/healthz')).status).toBe(200);
    expect(await metric('baton_store_full')).toBe(1);
    expect(await metric('baton_store_full_errors_total')).toBeGreaterThanOrEqual(REFUSALS);
    const said = lines.filter((l) => l.msg.startsWith('store_full:'));
    expect(said.length).toBeGreaterThanOrEqual(1);
    // Once per interval (30 s), not once per failed write.
    expect(said.length).toBeLessThanOrEqual(1 + Math.floor((Date.now() - started) / 30_000));

    // Space returns: readiness comes back by itself (its probe write succeeds), then submits do.
    disk.resize(256 * MiB);
    const grown = performance.now();
    await until('/readyz is ready again', async () => (await fetch(node.url + '/readyz')).status === 200);
    const ready = performance.now();
    const after = await submit(-1);
    const accepted = performance.now();
    expect(after.status).toBe(201);
    expect(await metric('baton_store_full')).toBe(0);
    expect(lines.filter((l) => l.msg.startsWith('store_full cleared')).length).toBeGreaterThanOrEqual(1);
    // The recovery figures of docs/operations.md ("What happens when something dies"), from here.
    const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
    console.log(
      `disk-full (${STORE_KIND}): after the tmpfs was grown, /readyz 200 at ${s(ready - grown)}, ` +
        `the first submit accepted at ${s(accepted - grown)}; ${acked.size} submits acknowledged, ${refused} refused`,
    );

    // Every acknowledged submit is there, whole.
    for (const [id, i] of acked) {
      const e = await api.getExecution(id);
      expect(e.message).toBe(`task ${i}`);
      expect((e.payload as { i: number }).i).toBe(i);
    }
    await node.stop();
    if (cluster) {
      const client = new pg.Client({ connectionString: cluster.url });
      await client.connect();
      try {
        const n = await client.query('SELECT count(*)::int AS n FROM executions WHERE id = ANY($1)', [[...acked.keys()]]);
        expect(n.rows[0].n).toBe(acked.size);
        // Every B-tree index agrees with its table (amcheck, shipped with PostgreSQL).
        await client.query('CREATE EXTENSION IF NOT EXISTS amcheck');
        const indexes = await client.query(
          `SELECT c.oid::regclass::text AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
           JOIN pg_am a ON a.oid = c.relam JOIN pg_namespace s ON s.oid = c.relnamespace
           WHERE a.amname = 'btree' AND s.nspname = 'public'`,
        );
        expect(indexes.rows.length).toBeGreaterThan(0);
        for (const { name } of indexes.rows) await client.query('SELECT bt_index_parent_check($1::regclass, true)', [name]);
      } finally {
        await client.end();
      }
    } else {
      const db = new Database(join(disk.dir, 'baton.sqlite'), { readonly: true });
      try {
        expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
        const ids = [...acked.keys()];
        const n = db.prepare(`SELECT count(*) AS n FROM executions WHERE id IN (${ids.map(() => '?').join(',')})`).get(...ids) as {
          n: number;
        };
        expect(n.n).toBe(acked.size);
      } finally {
        db.close();
      }
    }
  }, 180_000);
});
