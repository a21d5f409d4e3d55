/**
 * Webhook benchmark: deliveries per second to one webhook through the real HTTP path
 * (rate limit, token, body, idempotency claim and completion, execution insert), every request
 * with its own Idempotency-Key, and a share of replays of earlier keys.
 */
import { randomBytes } from 'node:crypto';
import { startNode } from '../../src/server/up.ts';
import type { StoreKind } from '../../src/store/adapter.ts';
import { round, summarize, type LatencySummary } from './stats.ts';
import { freshDb } from './stores.ts';

export interface WebhookBenchConfig {
  store: StoreKind;
  pgUrl: string;
  requests: number; // default 2,000
  concurrency: number; // default 16
  replayShare: number; // fraction of requests that replay an earlier key, default 0.1
}

export interface WebhookBenchResult {
  store: StoreKind;
  requests: number;
  concurrency: number;
  perSecond: number;
  latencyMs: LatencySummary;
  statuses: Record<string, number>;
  executions: number;
}

export async function runWebhookBench(c: Partial<WebhookBenchConfig> & { pgUrl: string }): Promise<WebhookBenchResult> {
  const cfg: WebhookBenchConfig = { store: 'postgres', requests: 2_000, concurrency: 16, replayShare: 0.1, ...c };
  const db = freshDb(cfg.store, cfg.pgUrl, 'hooks');
  const saved = { a: process.env.BATON_HOOK_RATE_PER_ADDRESS, w: process.env.BATON_HOOK_RATE_PER_WEBHOOK };
  process.env.BATON_HOOK_RATE_PER_ADDRESS = process.env.BATON_HOOK_RATE_PER_WEBHOOK = '1000000';
  const node = await startNode({
    env: { dataDir: db.dataDir, databaseUrl: db.kind === 'postgres' ? db.url : undefined, pgSchema: db.schema, port: 0, host: '127.0.0.1' },
    logger: false,
    reaper: false,
    scheduler: false,
    dispatcher: false,
    canaryIntervalMs: 0,
  });
  try {
    await node.engine.agents.create({ name: 'hooked', max_backlog: 10_000_000 }, 'bench');
    const { token } = await node.engine.webhooks.create({ name: 'bench', agent: 'hooked' }, 'bench');
    const url = `${node.url}/hooks/${token}`;
    const keys: string[] = [];
    const statuses: Record<string, number> = {};
    const lat: number[] = [];
    let next = 0;
    const one = async () => {
      const replay = keys.length > 0 && Math.random() < cfg.replayShare;
      const key = replay ? keys[Math.floor(Math.random() * keys.length)]! : randomBytes(12).toString('base64url');
      const body = '{"bench":true}'; // a replay must repeat the request exactly
      const t0 = performance.now();
      const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body });
      await res.text();
      lat.push(performance.now() - t0);
      const tag = `${res.status}${res.headers.get('idempotent-replay') ? ' replay' : ''}`;
      statuses[tag] = (statuses[tag] ?? 0) + 1;
      if (!replay) keys.push(key);
    };
    const start = performance.now();
    await Promise.all(
      Array.from({ length: cfg.concurrency }, async () => {
        while (next++ < cfg.requests) await one();
      }),
    );
    const seconds = (performance.now() - start) / 1000;
    const executions = Number(
      (
        await node.store.db
          .selectFrom('executions')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    );
    return {
      store: cfg.store,
      requests: cfg.requests,
      concurrency: cfg.concurrency,
      perSecond: round(cfg.requests / seconds, 0),
      latencyMs: summarize(lat),
      statuses,
      executions,
    };
  } finally {
    await node.stop();
    if (saved.a === undefined) delete process.env.BATON_HOOK_RATE_PER_ADDRESS;
    else process.env.BATON_HOOK_RATE_PER_ADDRESS = saved.a;
    if (saved.w === undefined) delete process.env.BATON_HOOK_RATE_PER_WEBHOOK;
    else process.env.BATON_HOOK_RATE_PER_WEBHOOK = saved.w;
    await db.cleanup();
  }
}
