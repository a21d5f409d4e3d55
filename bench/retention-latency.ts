/**
 * What the pruner costs the live path: submit → claim latency and event-loop stalls on SQLite,
 * first with the pruner idle, then while it sweeps a seeded history (paced as in `baton up`).
 *
 *   node --import tsx bench/retention-latency.ts [--count 100000] [--tasks 300] [--gap-ms 15] [--pause-factor 1] [--batch 200]
 *
 * One in-process engine on a temporary SQLite file; a worker long-polls claims for one agent and
 * completes each task at once; the driver submits a task every gap-ms and records when its claim
 * returned. The pruner runs its own passes back to back, honouring each pass's `nextInMs`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Engine } from '../src/engine/engine.ts';
import { Pruner } from '../src/retention/pruner.ts';
import { openSqlite } from '../src/store/sqlite.ts';
import { seedHistory } from '../test/helpers/history.ts';

const { values: args } = parseArgs({
  options: {
    count: { type: 'string', default: '100000' },
    tasks: { type: 'string', default: '300' },
    'gap-ms': { type: 'string', default: '15' },
    'pause-factor': { type: 'string', default: '1' },
    batch: { type: 'string' },
  },
});
const dir = mkdtempSync(join(tmpdir(), 'baton-retention-latency-'));
const store = openSqlite(join(dir, 'baton.sqlite'));
const DAY = 86_400_000;
try {
  await store.migrate();
  await seedHistory(store, { count: Number(args.count), from: Date.now() - 60 * DAY, stepMs: 10 });
  const engine = new Engine({ store, nodeId: 'bench', claimPollMs: 1000 });
  await engine.agents.create({ name: 'lat', max_parallel: 1, max_backlog: 10_000 }, 'bench');
  const submitted = new Map<string, number>();
  const latencies: number[] = [];
  let stop = false;
  const worker = (async () => {
    while (!stop) {
      const rows = await engine.claim('lat', { owner: 'w', max: 1, waitMs: 500 });
      const t = performance.now();
      for (const r of rows) {
        const s = submitted.get(r.id);
        if (s !== undefined) latencies.push(t - s);
        await engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'w');
      }
    }
  })();
  const phase = async (label: string, whileRunning?: () => boolean) => {
    latencies.length = 0;
    const loop = monitorEventLoopDelay({ resolution: 1 });
    loop.enable();
    for (let i = 0; i < Number(args.tasks) && (whileRunning?.() ?? true); i++) {
      const t = performance.now();
      const row = await engine.submit('lat', { message: 'ping' }, 'bench');
      submitted.set(row.id, t);
      await new Promise((r) => setTimeout(r, Number(args['gap-ms'])));
    }
    await new Promise((r) => setTimeout(r, 200));
    loop.disable();
    const xs = [...latencies].sort((a, b) => a - b);
    const q = (p: number) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))]!.toFixed(1);
    console.log(
      `${label}: ${xs.length} tasks, submit→claim p50 ${q(0.5)} ms, p90 ${q(0.9)} ms, p99 ${q(0.99)} ms, max ${q(1)} ms; event-loop delay max ${(loop.max / 1e6).toFixed(1)} ms, p99 ${(loop.percentile(99) / 1e6).toFixed(1)} ms`,
    );
  };
  await phase('pruner idle');
  const pruner = new Pruner({
    store,
    settings: { retentionDays: 30, auditRetentionDays: 365 },
    nodeId: 'bench',
    pauseFactor: Number(args['pause-factor']),
    batchSize: args.batch ? Number(args.batch) : undefined,
  });
  let sweeping = true;
  let maxTx = 0;
  let removed = 0;
  const t0 = performance.now();
  const sweep = (async () => {
    for (;;) {
      const out = await pruner.pass();
      if (out.report) {
        maxTx = out.report.max_tx_ms;
        removed = out.report.executions;
        console.log(
          `sweep: ${removed} executions in ${((performance.now() - t0) / 1000).toFixed(1)} s = ${Math.round(removed / ((performance.now() - t0) / 1000))} executions/s paced; longest batch transaction ${maxTx.toFixed(1)} ms`,
        );
        sweeping = false;
      }
      if (out.nextInMs === undefined) break;
      await new Promise((r) => setTimeout(r, out.nextInMs));
    }
  })();
  await phase('pruner sweeping', () => sweeping);
  await sweep;
  stop = true;
  await worker;
  engine.close();
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
