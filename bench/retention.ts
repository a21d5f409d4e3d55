/**
 * Retention bench: seed N realistic finished executions, measure the store's size per execution,
 * then prune them all and report the rate, the longest batch transaction and what vacuum gave back.
 *
 *   node --import tsx bench/retention.ts --store sqlite|postgres [--count 100000] [--batch 500] [--archive]
 *
 * PostgreSQL: BATON_BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test), in a
 * fresh schema dropped afterwards. SQLite: a temporary file.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import pg from 'pg';
import { ArchiveWriter } from '../src/retention/archive.ts';
import { pruneOnce, startCursor, type PruneCursor } from '../src/retention/prune.ts';
import { readHistoryStats } from '../src/retention/stats.ts';
import { openPostgres } from '../src/store/postgres.ts';
import { openSqlite } from '../src/store/sqlite.ts';
import { seedHistory } from '../test/helpers/history.ts';

const { values: args } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    count: { type: 'string', default: '100000' },
    batch: { type: 'string', default: '500' },
    archive: { type: 'boolean', default: false },
  },
});
const count = Number(args.count);
const batchSize = Number(args.batch);
const url = process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const dir = mkdtempSync(join(tmpdir(), 'baton-retention-bench-'));
const schema = `bench_ret_${Date.now().toString(36)}`;
const store = args.store === 'postgres' ? openPostgres({ url, schema }) : openSqlite(join(dir, 'baton.sqlite'));
const DAY = 86_400_000;
const now = Date.now();

try {
  await store.migrate();
  const t0 = performance.now();
  await seedHistory(store, { count, from: now - 60 * DAY, stepMs: 10, keysEvery: 10, logsEvery: 3 });
  const seedS = (performance.now() - t0) / 1000;
  let bytes: number;
  if (store.kind === 'postgres') {
    await sql`ANALYZE`.execute(store.db);
    const r = await sql<{
      b: string;
    }>`SELECT sum(pg_total_relation_size(c.oid))::bigint AS b FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ${schema} AND c.relkind = 'r'`.execute(
      store.db,
    );
    bytes = Number(r.rows[0]!.b);
  } else {
    await sql`PRAGMA wal_checkpoint(TRUNCATE)`.execute(store.db);
    bytes = statSync(join(dir, 'baton.sqlite')).size;
  }
  console.log(
    `seeded ${count} executions in ${seedS.toFixed(1)} s; ${(bytes / 2 ** 20).toFixed(1)} MiB, ${(bytes / count).toFixed(0)} bytes per execution`,
  );
  console.log('stats before:', JSON.stringify(await readHistoryStats(store, { retentionDays: 30, auditRetentionDays: 365 })));

  const archive = args.archive ? new ArchiveWriter(join(dir, 'archive')) : undefined;
  let cursor: PruneCursor = startCursor();
  const txs: number[] = [];
  let removed = 0;
  const p0 = performance.now();
  let selected: Awaited<ReturnType<typeof pruneOnce>>['prefetched'];
  while (cursor.phase !== 'done') {
    // As the server's pruner does: the next batch is read while this one deletes.
    const b = await pruneOnce({
      store,
      settings: { retentionDays: 30, auditRetentionDays: 365 },
      now,
      cursor,
      batchSize,
      archive,
      selected,
    });
    if (b.txMs > 0) txs.push(b.txMs);
    removed += b.executions;
    cursor = b.next;
    selected = b.prefetched;
  }
  const pruneS = (performance.now() - p0) / 1000;
  txs.sort((a, b) => a - b);
  const q = (p: number) => txs[Math.min(txs.length - 1, Math.floor(p * txs.length))]!.toFixed(1);
  console.log(
    `pruned ${removed} executions in ${pruneS.toFixed(2)} s = ${Math.round(removed / pruneS)} executions/s (back to back, batch ${batchSize}${archive ? ', archived' : ''})`,
  );
  console.log(`batch transactions: ${txs.length}, p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${txs[txs.length - 1]!.toFixed(1)} ms`);
  if (store.kind === 'sqlite') {
    let steps = 0;
    let longest = 0;
    for (;;) {
      const s0 = performance.now();
      const left = await store.reclaimSpace(2048);
      longest = Math.max(longest, performance.now() - s0);
      steps++;
      if (left === 0) break;
    }
    await sql`PRAGMA wal_checkpoint(TRUNCATE)`.execute(store.db);
    console.log(
      `incremental vacuum: ${steps} steps of 2048 pages, longest ${longest.toFixed(1)} ms; file now ${(statSync(join(dir, 'baton.sqlite')).size / 2 ** 20).toFixed(1)} MiB`,
    );
  }
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
  if (args.store === 'postgres') {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.end();
  }
}
