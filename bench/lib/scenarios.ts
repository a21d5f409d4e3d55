/**
 * The scenarios the delivery and trigger issues added to `npm run bench`, run after W1/W2:
 * - worker: W1 through `baton worker -- true` (a process spawn per task included);
 * - push: push delivery to a local no-op HTTP agent;
 * - triggers: 10,000 schedules due in the same minute (fire lag), and webhook requests/s with
 *   idempotency keys (PostgreSQL only: a deployment with many senders runs on it);
 * - cli: start-up of HTTP-only `baton` commands from the installed package;
 * - bodies: the largest bodies each route takes, in their costliest shape, and how long each holds
 *   everybody else's requests (worst /healthz latency while it is handled; bench/lib/bodies.ts);
 * - backlog: a submit, one agent and the agents list with 0 to 300,000 queued for one agent
 *   (bench/lib/backlog.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { StoreKind } from '../../src/store/adapter.ts';
import { startNode } from '../../src/server/up.ts';
import { runPushBench, type PushBenchResult } from './push-bench.ts';
import { runFireLag, type FireLagResult } from './triggers-fire-lag.ts';
import { runWebhookBench, type WebhookBenchResult } from './triggers-webhooks.ts';
import { runWorkerBench, type WorkerBenchResult } from './worker-bench.ts';
import { CLI_TARGET_MS, runCliBench, type CliBenchResult } from './cli-bench.ts';
import { runBodiesBench, type BodiesResult } from './bodies.ts';
import { BACKLOG_RATIO_TARGET, runBacklogBench, type BacklogResult } from './backlog.ts';

export const SCENARIOS = ['worker', 'push', 'triggers', 'cli', 'bodies', 'backlog'] as const;
export type Scenario = (typeof SCENARIOS)[number];

export interface ScenarioResults {
  worker?: WorkerBenchResult;
  push?: PushBenchResult;
  /** Each run: by default three with one `baton up` process (the default deployment), then three with three sharing the database. */
  fire_lag?: FireLagResult[];
  webhooks?: WebhookBenchResult;
  cli?: CliBenchResult;
  bodies?: BodiesResult;
  backlog?: BacklogResult;
}

export interface ScenarioOptions {
  pgUrl: string;
  workerTasks: number;
  pushTasks: number;
  schedules: number;
  /** `baton up` processes firing the schedules, one setting after the other. */
  fireLagProcesses: number[];
  /** Runs per setting: the machine's noise (e.g. a PostgreSQL checkpoint in progress) moves a single run by ±30 %. */
  fireLagRuns: number;
  log: (line: string) => void;
}

/** Runs the chosen scenarios on one store against an in-process `baton up`. */
export async function runScenarios(store: StoreKind, which: Scenario[], o: ScenarioOptions): Promise<ScenarioResults> {
  const out: ScenarioResults = {};
  if (which.includes('worker') || which.includes('push') || which.includes('cli')) {
    const dataDir = mkdtempSync(join(tmpdir(), 'baton-bench-delivery-'));
    const schema = store === 'postgres' ? `bench_delivery_${Date.now().toString(36)}` : undefined;
    const node = await startNode({
      env: { dataDir, port: 0, host: '127.0.0.1', ...(schema ? { databaseUrl: o.pgUrl, pgSchema: schema } : {}) },
      logger: false,
    });
    const server = { url: node.url, key: node.createdAdminKey! };
    try {
      if (which.includes('worker')) {
        o.log(`▶ ${store} W1 via baton worker -- true …`);
        out.worker = await runWorkerBench(server, { tasks: o.workerTasks });
        o.log(`  ${out.worker.tasks_per_s} tasks/s`);
      }
      if (which.includes('push')) {
        o.log(`▶ ${store} push to a no-op HTTP agent …`);
        out.push = await runPushBench(server, { tasks: o.pushTasks });
        o.log(`  ${out.push.tasks_per_s} tasks/s`);
      }
      if (which.includes('cli')) {
        o.log(`▶ ${store} CLI start-up from the installed package …`);
        out.cli = await runCliBench(server, { log: o.log });
        for (const c of out.cli.commands) o.log(`  ${c.command}: p50 ${c.ms.p50.toFixed(0)} ms, p95 ${c.ms.p95.toFixed(0)} ms`);
      }
    } finally {
      await node.stop();
      rmSync(dataDir, { recursive: true, force: true });
      if (schema) {
        const c = new pg.Client({ connectionString: o.pgUrl });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await c.end();
      }
    }
  }
  if (which.includes('triggers') && store === 'postgres') {
    out.fire_lag = [];
    for (const processes of o.fireLagProcesses) {
      for (let run = 1; run <= o.fireLagRuns; run++) {
        o.log(
          `▶ postgres ${o.schedules} schedules due at once, ${processes} baton up process${processes > 1 ? 'es' : ''}, run ${run} of ${o.fireLagRuns} …`,
        );
        const r = await runFireLag({ pgUrl: o.pgUrl, schedules: o.schedules, processes });
        out.fire_lag.push(r);
        o.log(
          `  fire lag p50 ${r.lagMs.p50.toFixed(0)} ms, p99 ${r.lagMs.p99.toFixed(0)} ms; machine ${r.machineBusyPct} % busy (${r.cpuS} CPU s)`,
        );
      }
    }
    o.log('▶ postgres webhooks with idempotency keys …');
    out.webhooks = await runWebhookBench({ pgUrl: o.pgUrl });
    o.log(`  ${out.webhooks.perSecond.toFixed(0)} requests/s`);
  }
  if (which.includes('bodies')) {
    o.log(`▶ ${store} the largest bodies, worst /healthz while each is handled …`);
    out.bodies = await runBodiesBench(store, o.pgUrl);
    for (const p of out.bodies.probes) o.log(`  ${p.body}: ${p.status}, worst /healthz ${Math.max(...p.worst_healthz_ms)} ms`);
  }
  if (which.includes('backlog')) {
    o.log(`▶ ${store} a deep backlog: submit, one agent, the agents list at 0 to 300,000 queued …`);
    out.backlog = await runBacklogBench(store, o.pgUrl);
    for (const p of out.backlog.probes)
      o.log(`  ${p.depth} queued: submit p50 ${p.submit_p50_ms} ms, agent ${p.get_agent_p50_ms} ms, list ${p.list_agents_p50_ms} ms`);
  }
  return out;
}

/** Rows for the printed table: scenario, store, figure, target. */
export function scenarioRows(store: StoreKind, r: ScenarioResults): string[][] {
  const rows: string[][] = [];
  if (r.worker)
    rows.push([
      store,
      'W1 via `baton worker -- true`',
      `${r.worker.tasks_per_s} tasks/s`,
      `${r.worker.tasks} tasks, concurrency ${r.worker.concurrency}, ${r.worker.failed} failed`,
    ]);
  if (r.push)
    rows.push([
      store,
      'push to a no-op HTTP agent',
      `${r.push.tasks_per_s} tasks/s`,
      `${r.push.tasks} tasks, max_parallel ${r.push.max_parallel}, ${r.push.failed} failed`,
    ]);
  for (const processes of [...new Set((r.fire_lag ?? []).map((f) => f.processes))]) {
    const runs = r.fire_lag!.filter((f) => f.processes === processes);
    const p99s = runs.map((f) => Math.round(f.lagMs.p99));
    const p50s = runs.map((f) => Math.round(f.lagMs.p50));
    const p99 = median(p99s);
    const met = p99s.filter((v) => v <= 1000).length;
    rows.push([
      store,
      `${runs[0]!.schedules} schedules due at once, ${processes} process${processes > 1 ? 'es' : ''}`,
      `fire lag p50 ${median(p50s)} ms, p99 ${p99} ms (median of ${runs.length})`,
      `target p99 ≤ 1,000 ms ${p99 <= 1000 ? 'met' : 'MISSED'} (in ${met} of ${runs.length} runs); p99 by run ${p99s.join(', ')} ms; CPU s by run ${runs.map((f) => f.cpuS ?? '?').join(', ')}`,
    ]);
  }
  for (const c of r.cli?.commands ?? [])
    rows.push([
      store,
      c.floor ? `\`${c.command}\` (a floor, for comparison)` : `\`${c.command}\` from the installed package`,
      `p50 ${c.ms.p50.toFixed(0)} ms, p95 ${c.ms.p95.toFixed(0)} ms`,
      `${c.ms.n} runs, max ${c.ms.max.toFixed(0)} ms` +
        (c.floor ? '' : `; target ≤ ${CLI_TARGET_MS} ms ${c.ms.p95 <= CLI_TARGET_MS ? 'met' : 'MISSED'} (p95)`),
    ]);
  for (const p of r.bodies?.probes ?? []) {
    const worst = Math.max(...p.worst_healthz_ms);
    rows.push([
      store,
      `largest body: ${p.body}`,
      `worst /healthz ${worst} ms`,
      `${p.mib} MiB, answered ${p.status}; by run ${p.worst_healthz_ms.join(', ')} ms; target ≤ ${r.bodies!.target_ms} ms ${worst <= r.bodies!.target_ms ? 'met' : 'MISSED'}`,
    ]);
  }
  const empty = r.backlog?.probes[0];
  for (const p of empty ? r.backlog!.probes.slice(1) : []) {
    const ratios = [
      p.submit_p50_ms / empty!.submit_p50_ms,
      p.get_agent_p50_ms / empty!.get_agent_p50_ms,
      p.list_agents_p50_ms / empty!.list_agents_p50_ms,
    ];
    const worst = Math.max(...ratios);
    rows.push([
      store,
      `${p.depth.toLocaleString('en-US')} queued for one agent`,
      `submit p50 ${p.submit_p50_ms} ms (max ${p.submit_max_ms}), agent ${p.get_agent_p50_ms} ms, agents list ${p.list_agents_p50_ms} ms`,
      `vs empty (${empty!.submit_p50_ms} / ${empty!.get_agent_p50_ms} / ${empty!.list_agents_p50_ms} ms) ${ratios.map((x) => `${x.toFixed(2)}×`).join(' / ')}; target ≤ ${BACKLOG_RATIO_TARGET}× ${worst <= BACKLOG_RATIO_TARGET ? 'met' : 'MISSED'}; filled at ${r.backlog!.fill_per_s.toLocaleString('en-US')}/s`,
    ]);
  }
  if (r.webhooks)
    rows.push([
      store,
      'webhooks with Idempotency-Key',
      `${r.webhooks.perSecond.toFixed(0)} requests/s`,
      `${r.webhooks.requests} requests, concurrency ${r.webhooks.concurrency}, p50 ${r.webhooks.latencyMs.p50.toFixed(1)} ms`,
    ]);
  return rows;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : Math.round((s[s.length / 2 - 1]! + s[s.length / 2]!) / 2);
}
