/**
 * Where the statements go: counts the SQL statements each engine operation sends (by leading
 * keyword), and times each operation alone, sequentially, in process. Counting wraps
 * pg.Client.prototype.query (PostgreSQL) and better-sqlite3's Statement run/get/all/iterate
 * (SQLite) for the duration of the probe only.
 */
import { BREAKER_DEFAULTS } from '../../src/domain/breaker.ts';
import Database from 'better-sqlite3';
import pg from 'pg';
import type { Driver } from './drivers.ts';
import { round } from './stats.ts';

type Counts = Record<string, number>;

function classify(sql: string): string {
  const m = /^\s*([A-Za-z]+)/.exec(sql);
  const kw = (m?.[1] ?? '?').toUpperCase();
  if (kw === 'SELECT' && /pg_notify/i.test(sql)) return 'NOTIFY';
  if (kw === 'SELECT' && /\bfor (no key )?update\b/i.test(sql)) return 'SELECT…FOR UPDATE';
  if (kw === 'SELECT' && /\bcount\(/i.test(sql)) return 'SELECT count';
  return kw;
}

export function installCounter(): { take(): Counts; takeTransactions(): number; takeTexts(): Counts; uninstall(): void } {
  let counts: Counts = {};
  // Each statement's text (whitespace folded, cut short): which statements a workload sends most.
  let texts: Counts = {};
  // PostgreSQL transactions: each START, plus each statement sent outside one (autocommit).
  let transactions = 0;
  const inTx = new WeakSet<object>();
  const bump = (sql: unknown, client?: object) => {
    const text = typeof sql === 'string' ? sql : ((sql as any)?.text ?? '');
    if (text.includes('pg_stat_activity')) return; // the benchmark's own CPU accounting
    const k = classify(text);
    counts[k] = (counts[k] ?? 0) + 1;
    const t = text.replace(/\s+/g, ' ').trim().slice(0, 100);
    texts[t] = (texts[t] ?? 0) + 1;
    if (!client) return;
    if (k === 'START' || k === 'BEGIN') {
      transactions++;
      inTx.add(client);
    } else if (k === 'COMMIT' || k === 'ROLLBACK') inTx.delete(client);
    else if (!inTx.has(client)) transactions++;
  };
  const pgProto = pg.Client.prototype as any;
  const origQuery = pgProto.query;
  pgProto.query = function (this: object, q: unknown, ...rest: unknown[]) {
    bump(q, this);
    return origQuery.call(this, q, ...rest);
  };
  // SQLite: count executions, not prepares (the store may keep statements prepared).
  const probe = new Database(':memory:');
  const stProto = Object.getPrototypeOf(probe.prepare('select 1'));
  probe.close();
  const stOrig: Record<string, (...args: unknown[]) => unknown> = {};
  for (const m of ['run', 'get', 'all', 'iterate']) {
    const orig = stProto[m];
    stOrig[m] = orig;
    stProto[m] = function (this: { source: string }, ...args: unknown[]) {
      bump(this.source);
      return orig.apply(this, args);
    };
  }
  return {
    take() {
      const c = counts;
      counts = {};
      return c;
    },
    takeTexts() {
      const c = texts;
      texts = {};
      return c;
    },
    takeTransactions() {
      const t = transactions;
      transactions = 0;
      return t;
    },
    uninstall() {
      pgProto.query = origQuery;
      for (const [m, f] of Object.entries(stOrig)) stProto[m] = f;
    },
  };
}

export interface OpAnatomy {
  op: string;
  statements: number;
  by_kind: Counts;
  /** Mean wall time of one call, ms, over `reps` sequential calls on an idle engine. */
  mean_ms: number;
  /** PostgreSQL only: backend CPU per call, ms (10 ms tick resolution over the whole block). */
  postgres_cpu_ms?: number | null;
}

const total = (c: Counts) => Object.values(c).reduce((a, b) => a + b, 0);

/** Measures something (PostgreSQL backend CPU seconds) over a block of calls. */
export type BlockMeter = () => Promise<{ stop(): Promise<number | null> }>;

/**
 * Probe submit, claim (one task), complete and an empty claim, each `reps` times in its own
 * block of sequential calls, on agents in their steady state (so a block meter can attribute CPU to one kind of operation).
 */
export async function probeAnatomy(driver: Driver, reps: number, blockMeter?: BlockMeter): Promise<OpAnatomy[]> {
  // One agent (max_parallel 1) per repetition, so every claim sees the usual small counts.
  const agents = Array.from({ length: reps }, (_, i) => `anatomy-${i}`);
  for (const a of agents) await driver.createAgent(a, 1, 10);
  // Warm up the code paths, and bring every agent to its steady state: the default circuit
  // breaker counts outcomes in a window of BREAKER_DEFAULTS.window (20); until that window is
  // full, each success changes the agent row, so its completion runs a transaction.
  for (const a of agents) {
    for (let i = 0; i < BREAKER_DEFAULTS.window; i++) {
      await driver.submit(a, i);
      const [t] = await driver.claim(a, { owner: 'probe', max: 1, waitMs: 0 });
      await driver.complete(t!.id, t!.token);
    }
  }
  await new Promise((r) => setTimeout(r, 50)); // let fire-and-forget notifications land
  const counter = installCounter();
  const out: OpAnatomy[] = [];
  const settle = () => new Promise((r) => setImmediate(r));
  async function block(op: string, call: (i: number) => Promise<unknown>): Promise<void> {
    counter.take();
    const meter = blockMeter ? await blockMeter() : undefined;
    const counts: Counts = {};
    let ms = 0;
    for (let i = 0; i < reps; i++) {
      const t = performance.now();
      await call(i);
      ms += performance.now() - t;
      await settle();
      for (const [k, v] of Object.entries(counter.take())) counts[k] = (counts[k] ?? 0) + v;
    }
    const pgSeconds = meter ? await meter.stop() : undefined;
    const by_kind: Counts = {};
    for (const [k, v] of Object.entries(counts)) by_kind[k] = round(v / reps, 2);
    out.push({
      op,
      statements: round(total(counts) / reps, 2),
      by_kind,
      mean_ms: round(ms / reps, 3),
      ...(pgSeconds !== undefined ? { postgres_cpu_ms: pgSeconds === null ? null : round((1000 * pgSeconds) / reps, 3) } : {}),
    });
  }
  try {
    const tasks: Array<{ id: string; token: string }> = [];
    await block('submit', (i) => driver.submit(agents[i]!, i));
    await block('claim (1 task)', async (i) => {
      const [t] = await driver.claim(agents[i]!, { owner: 'probe', max: 1, waitMs: 0 });
      tasks.push(t!);
    });
    await block('complete', (i) => driver.complete(tasks[i]!.id, tasks[i]!.token));
    await block('claim (empty queue)', (i) => driver.claim(agents[i]!, { owner: 'probe', max: 1, waitMs: 0 }));
    return out;
  } finally {
    counter.uninstall();
  }
}
