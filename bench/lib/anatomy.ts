/**
 * Where the statements go: counts the SQL statements each engine operation sends (by leading
 * keyword), and times each operation alone, sequentially, in process. Counting wraps
 * pg.Client.prototype.query (PostgreSQL) and better-sqlite3's Statement run/get/all/iterate
 * (SQLite) for the duration of the probe only.
 */
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

export function installCounter(): { take(): Counts; uninstall(): void } {
  let counts: Counts = {};
  const bump = (sql: unknown) => {
    const text = typeof sql === 'string' ? sql : (sql as any)?.text ?? '';
    const k = classify(text);
    counts[k] = (counts[k] ?? 0) + 1;
  };
  const pgProto = pg.Client.prototype as any;
  const origQuery = pgProto.query;
  pgProto.query = function (this: unknown, q: unknown, ...rest: unknown[]) {
    bump(q);
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
}

const total = (c: Counts) => Object.values(c).reduce((a, b) => a + b, 0);

/** Probe submit, claim (one task), complete and an empty claim, each alone, `reps` times. */
export async function probeAnatomy(driver: Driver, reps: number): Promise<OpAnatomy[]> {
  const agent = 'anatomy';
  await driver.createAgent(agent, 1, reps + 10);
  // warm up the code paths first
  for (let i = 0; i < 20; i++) {
    await driver.submit(agent, i);
    const [t] = await driver.claim(agent, { owner: 'probe', max: 1, waitMs: 0 });
    await driver.complete(t!.id, t!.token);
  }
  await new Promise((r) => setTimeout(r, 50)); // let fire-and-forget notifications land
  const counter = installCounter();
  try {
    const ops: Record<string, { counts: Counts; ms: number }> = {};
    const add = (op: string, c: Counts, ms: number) => {
      const o = (ops[op] ??= { counts: {}, ms: 0 });
      for (const [k, v] of Object.entries(c)) o.counts[k] = (o.counts[k] ?? 0) + v;
      o.ms += ms;
    };
    const settle = () => new Promise((r) => setImmediate(r));
    for (let i = 0; i < reps; i++) {
      let t = performance.now();
      await driver.submit(agent, i);
      let ms = performance.now() - t;
      await settle();
      add('submit', counter.take(), ms);

      t = performance.now();
      const [task] = await driver.claim(agent, { owner: 'probe', max: 1, waitMs: 0 });
      ms = performance.now() - t;
      await settle();
      add('claim (1 task)', counter.take(), ms);

      t = performance.now();
      await driver.complete(task!.id, task!.token);
      ms = performance.now() - t;
      await settle();
      add('complete', counter.take(), ms);

      t = performance.now();
      await driver.claim(agent, { owner: 'probe', max: 1, waitMs: 0 });
      ms = performance.now() - t;
      await settle();
      add('claim (empty queue)', counter.take(), ms);
    }
    return Object.entries(ops).map(([op, o]) => {
      const by_kind: Counts = {};
      for (const [k, v] of Object.entries(o.counts)) by_kind[k] = round(v / reps, 2);
      return { op, statements: round(total(o.counts) / reps, 2), by_kind, mean_ms: round(o.ms / reps, 3) };
    });
  } finally {
    counter.uninstall();
  }
}
