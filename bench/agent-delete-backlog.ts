/**
 * Deleting an agent with a deep backlog: what it sends and how long it holds the event loop. Measures; never asserts.
 *
 *   node --import tsx bench/agent-delete-backlog.ts --store sqlite --backlog 100000
 *   node --import tsx bench/agent-delete-backlog.ts --store postgres --backlog 100000
 *
 * A fresh store (or `--reuse` one), an agent given `backlog` queued tasks through the engine, then
 * deleted (engine.agents.delete: its queue cancelled in chunks, src/engine/agents.ts): the wall
 * time, statements and transactions sent, the process's CPU, and the event loop's turns and
 * longest gap between them during the delete (a setImmediate chain).
 * Options: --store sqlite|postgres, --backlog N (default 100000), --reuse <file|schema>, --pg-url URL.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import type { KyselyPlugin } from 'kysely';
import pg from 'pg';
import { Engine } from '../src/engine/engine.ts';
import type { StoreAdapter } from '../src/store/adapter.ts';
import { openPostgres } from '../src/store/postgres.ts';
import { openSqlite } from '../src/store/sqlite.ts';
import { wrapStore } from './lib/wrap-store.ts';

const { values: a } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    backlog: { type: 'string', default: '100000' },
    reuse: { type: 'string' },
    'pg-url': { type: 'string', default: process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
  },
});
const kind = a.store === 'postgres' ? 'postgres' : 'sqlite';
const log = (s: string) => process.stdout.write(s + '\n');
const load = () => readFileSync('/proc/loadavg', 'utf8').trim().split(' ').slice(0, 3).join(' ');

async function main() {
  const keepAlive = setInterval(() => {}, 1_000);
  const fresh = !a.reuse;
  const where =
    kind === 'sqlite'
      ? (a.reuse ?? join(mkdtempSync(join(tmpdir(), 'baton-delete-backlog-')), 'baton.sqlite'))
      : (a.reuse ?? `delete_backlog_${process.pid}_${Date.now().toString(36)}`);
  const store: StoreAdapter = kind === 'sqlite' ? openSqlite(where) : openPostgres({ url: a['pg-url']!, schema: where });
  await store.migrate();
  const sent = { statements: 0, transactions: 0 };
  /** Statements by shape (their first words). */
  const shapes = new Map<string, number>();
  let counting = false;
  const counted = wrapStore(store, (k) => {
    const plugin: KyselyPlugin = {
      transformQuery: ({ node, queryId }) => {
        if (counting) {
          const shape = k.getExecutor().compileQuery(node, queryId).sql.replace(/\s+/g, ' ').slice(0, 70);
          shapes.set(shape, (shapes.get(shape) ?? 0) + 1);
        }
        return node;
      },
      transformResult: async ({ result }) => (sent.statements++, result),
    };
    return k.withPlugin(plugin) as typeof k;
  });
  const transaction = counted.transaction.bind(counted);
  counted.transaction = (fn) => (sent.transactions++, transaction(fn));
  const setup = new Engine({ store, nodeId: 'bench-setup' });
  const engine = new Engine({ store: counted, nodeId: 'bench' });
  try {
    const name = `deep-${Date.now().toString(36)}`;
    const backlog = Number(a.backlog);
    await setup.agents.create({ name, max_parallel: 3, max_backlog: 1_000_000 }, 'bench');
    const t0 = performance.now();
    for (let i = 0; i < backlog; i += 1000)
      await setup.submitMany(
        name,
        Array.from({ length: Math.min(1000, backlog - i) }, (_, j) => ({ message: `deep ${i + j}` })),
        'bench',
      );
    log(`${kind} ${where}: ${backlog} queued on ${name} in ${((performance.now() - t0) / 1000).toFixed(1)} s; load ${load()}`);
    let turns = 0;
    let last = performance.now();
    let longest = 0;
    let running = true;
    const tick = () => {
      const t = performance.now();
      longest = Math.max(longest, t - last);
      last = t;
      turns++;
      if (running) setImmediate(tick);
    };
    setImmediate(tick);
    const c0 = process.cpuUsage();
    const t1 = performance.now();
    counting = true;
    const out = await engine.agents.delete(name, 'bench');
    counting = false;
    const wall = performance.now() - t1;
    const cpu = process.cpuUsage(c0);
    running = false;
    longest = Math.max(longest, performance.now() - last);
    log(
      `delete: ${JSON.stringify(out)} in ${(wall / 1000).toFixed(2)} s; ${sent.statements} statements, ${sent.transactions} transactions; ` +
        `process CPU ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms; event-loop turns ${turns}, longest gap ${longest.toFixed(1)} ms; load ${load()}`,
    );
    for (const [shape, n] of [...shapes].sort((x, y) => y[1] - x[1]).slice(0, 6)) log(`  ${String(n).padStart(7)} × ${shape}`);
  } finally {
    engine.close();
    setup.close();
    await store.close();
    clearInterval(keepAlive);
    if (fresh) {
      if (kind === 'sqlite') rmSync(dirname(where), { recursive: true, force: true });
      else {
        const c = new pg.Client({ connectionString: a['pg-url'] });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS ${where} CASCADE`);
        await c.end();
      }
    }
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
