/**
 * Delivery benchmarks on their own, until bench/run.ts registers them:
 *
 *   node --import tsx bench/delivery.ts [--store sqlite|postgres] [--tasks N] [--push-tasks N]
 *
 * W1 through `baton worker -- true` (bench/lib/worker-bench.ts) and push delivery to a local
 * no-op HTTP agent (bench/lib/push-bench.ts), against an in-process `baton up`. Prints tasks/s.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startNode } from '../src/server/up.ts';
import { runPushBench } from './lib/push-bench.ts';
import { runWorkerBench } from './lib/worker-bench.ts';

const { values: a } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    tasks: { type: 'string', default: '500' },
    concurrency: { type: 'string', default: '8' },
    'push-tasks': { type: 'string', default: '2000' },
    'push-parallel': { type: 'string', default: '32' },
    'pg-url': { type: 'string', default: process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
  },
});

const dataDir = mkdtempSync(join(tmpdir(), 'baton-bench-delivery-'));
const schema = a.store === 'postgres' ? `bench_delivery_${Date.now().toString(36)}` : undefined;
const node = await startNode({
  env: { dataDir, port: 0, host: '127.0.0.1', ...(schema ? { databaseUrl: a['pg-url'], pgSchema: schema } : {}) },
  logger: false,
});
const server = { url: node.url, key: node.createdAdminKey! };
try {
  const w = await runWorkerBench(server, { tasks: Number(a.tasks), concurrency: Number(a.concurrency) });
  console.log(`${a.store}  W1 via baton worker -- true   ${w.tasks} tasks, concurrency ${w.concurrency}: ${w.tasks_per_s} tasks/s (${w.seconds} s, ${w.failed} failed)`);
  const p = await runPushBench(server, { tasks: Number(a['push-tasks']), maxParallel: Number(a['push-parallel']) });
  console.log(`${a.store}  push to a no-op HTTP agent    ${p.tasks} tasks, max_parallel ${p.max_parallel}: ${p.tasks_per_s} tasks/s (${p.seconds} s, ${p.failed} failed)`);
} finally {
  await node.stop();
  rmSync(dataDir, { recursive: true, force: true });
  if (schema) {
    const c = new pg.Client({ connectionString: a['pg-url'] });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.end();
  }
}
