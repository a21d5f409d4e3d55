import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { tickSchedulesOnce } from '../../src/engine/triggers/scheduler.ts';
import { openSqlite } from '../../src/store/sqlite.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { manualClock } from '../helpers/clock.ts';
import { STORE_KIND } from '../helpers/store.ts';

/**
 * SQLite prepares a statement again on every run when its plan read a bound value: a bound
 * LIMIT, a bound term on a column a partial index's WHERE names (`enabled = ?` against
 * `WHERE enabled = 1`), or any bound indexed term once sqlite_stat4 holds samples. These tests
 * hold the store to the three ways it avoids that (sqlite-compiler.ts, engine/status-sql.ts,
 * forgetValueSamples in sqlite.ts). SQLite's planner only: PostgreSQL plans a named statement
 * once, whatever it binds.
 */
const describeSqlite = STORE_KIND === 'sqlite' ? describe : describe.skip;

/** Every SQL text a better-sqlite3 statement runs while `fn` runs (this thread's connections). */
async function statementsRun(fn: () => Promise<void>): Promise<string[]> {
  const probe = new Database(':memory:');
  const proto = Object.getPrototypeOf(probe.prepare('select 1'));
  probe.close();
  const seen = new Set<string>();
  const saved: Record<string, (...args: unknown[]) => unknown> = {};
  for (const m of ['run', 'get', 'all', 'iterate']) {
    saved[m] = proto[m];
    proto[m] = function (this: { source: string }, ...args: unknown[]) {
      seen.add(this.source);
      return saved[m]!.apply(this, args);
    };
  }
  try {
    await fn();
  } finally {
    Object.assign(proto, saved);
  }
  return [...seen];
}

describeSqlite('SQLite statements keep their plans between runs', () => {
  let dir: string;
  let store: StoreAdapter;
  let engine: Engine;
  const clock = manualClock(Date.UTC(2026, 5, 1));

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'baton-plans-kept-'));
    store = openSqlite(join(dir, 'baton.sqlite'));
    await store.migrate();
    engine = new Engine({ store, clock, nodeId: 'plans-kept' });
  });
  afterAll(async () => {
    engine.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('writes LIMIT and OFFSET into the text when they are whole numbers, and binds anything else', () => {
    const q = store.db.selectFrom('executions').select('id').orderBy('id').limit(25).offset(50).compile();
    expect(q.sql).toMatch(/ limit 25 offset 50$/);
    expect(q.parameters).toEqual([]);
    const reader = store.reader.selectFrom('executions').select('id').limit(7).compile();
    expect(reader.sql).toMatch(/ limit 7$/);
    // Not a whole number: bound as before (SQLite then rejects it as it would have).
    expect(store.db.selectFrom('executions').select('id').limit(2.5).compile().parameters).toEqual([2.5]);
    const expr = store.db
      .selectFrom('executions')
      .select('id')
      .limit(sql<number>`${3} + 1`)
      .compile();
    expect(expr.sql).toMatch(/ limit \? \+ 1$/);
    expect(expr.parameters).toEqual([3]);
  });

  it('a submit, a claim, a chained completion and a scheduler pass bind no LIMIT or enabled flag; the serial-key check seeks its index', async () => {
    await engine.agents.create({ name: 'src', max_parallel: 3 }, 'test');
    await engine.agents.create({ name: 'dst', max_parallel: 3 }, 'test');
    await engine.subscriptions.create({ source_agent: 'src', target_agent: 'dst', on: 'succeeded', message: 'after' }, 'test');
    await engine.schedules.create('src', { name: 'every-minute', cron: '* * * * *', message: 'tick' }, 'test');
    const texts = await statementsRun(async () => {
      await engine.submit('src', { message: 'one' }, 'test');
      const [task] = await engine.claim('src', { owner: 'w', max: 3 });
      await engine.complete(task!.id, task!.lease_token!, { status: 'succeeded', result: { ok: true } }, 'w');
      clock.advance(120_000);
      await tickSchedulesOnce(engine);
    });
    // The pass really ran what it guards: the subscription was followed, the schedule fired.
    expect(texts.some((t) => /from "subscriptions"/.test(t))).toBe(true);
    expect(texts.some((t) => /from "schedules"/.test(t))).toBe(true);
    expect(await store.db.selectFrom('executions').select('id').where('agent', '=', 'dst').execute()).toHaveLength(1);
    const fired = await store.db.selectFrom('executions').select('id').where('schedule_id', 'is not', null).execute();
    expect(fired.length).toBeGreaterThan(0);
    const offenders = texts.filter((t) => /\b(limit|offset) \?/i.test(t) || /"enabled" = \?/.test(t));
    expect(offenders).toEqual([]);
    // On a store never analysed, the claim's serial-key check seeks the partial index of running
    // serial rows, not every running row.
    const candidates = texts.find((t) => /"serial_key" is null or not exists/.test(t));
    expect(candidates, 'the claim read its candidates').toBeDefined();
    const raw = new Database(join(dir, 'baton.sqlite'), { readonly: true });
    try {
      const plan = raw
        .prepare(`EXPLAIN QUERY PLAN ${candidates!}`)
        .all('src', clock())
        .map((r) => (r as { detail: string }).detail);
      expect(plan.join(' / ')).toMatch(/SEARCH k USING COVERING INDEX executions_serial_running/);
    } finally {
      raw.close();
    }
  });

  it('forgets the value samples an ANALYZE left, and keeps the row counts, when the store opens', async () => {
    const file = join(dir, 'analyzed.sqlite');
    const first = openSqlite(file);
    await first.migrate();
    const e = new Engine({ store: first, clock, nodeId: 'plans-kept-2' });
    await e.agents.create({ name: 'a', max_parallel: 1 }, 'test');
    for (let i = 0; i < 20; i++) await e.submit('a', { message: `m${i}` }, 'test');
    e.close();
    await sql`ANALYZE`.execute(first.db);
    await first.close();
    const count = (table: string) => {
      const db = new Database(file, { readonly: true });
      try {
        return (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
      } finally {
        db.close();
      }
    };
    expect(count('sqlite_stat4')).toBeGreaterThan(0);
    const stat1 = count('sqlite_stat1');
    expect(stat1).toBeGreaterThan(0);

    const again = openSqlite(file);
    try {
      expect(count('sqlite_stat4')).toBe(0);
      expect(count('sqlite_stat1')).toBe(stat1);
      // Still a working store.
      expect(await again.db.selectFrom('executions').select('id').where('agent', '=', 'a').execute()).toHaveLength(20);
    } finally {
      await again.close();
    }
  });
});
