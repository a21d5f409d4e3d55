import { CompiledQuery } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitingSince } from '../../src/engine/backlog.ts';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

// The reaper's backlog-expiry sweep runs every reaper interval (2 s). Its conditions (waiting
// since before the cutoff, counting from the last start and from run_after) are expressions no
// index holds, so alone they filtered every queued row, and a deep backlog held SQLite's event
// loop past the 50 ms a step may take (docs/benchmarks.md). A row is created no later than it begins to wait, so
// the sweep also asks for rows created before the cutoff: a range of executions_status_recent.

const DAY = 86_400_000;
const EXPIRY = DAY;
const BACKLOG = 12_000;
const clock = manualClock();
let ts: TestStore;
let engine: Engine;
const old: string[] = [];

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'sweep-test', clock, backlogExpiryMs: EXPIRY });
  await engine.agents.create({ name: 'deep', max_parallel: 1, max_backlog: 100_000 }, 'test');
  // Three tasks a day and an hour old; a fourth as old, delayed until a minute ago (not stale:
  // a delayed task waits from its run_after).
  for (let i = 0; i < 3; i++) old.push((await engine.submit('deep', { message: `old ${i}` }, 'test')).id);
  clock.advance(EXPIRY + 3_600_000 - 60_000);
  const delayed = await engine.submit('deep', { message: 'delayed' }, 'test');
  await ts.store.db
    .updateTable('executions')
    .set({ created_at: clock() - EXPIRY - 3_600_000, queued_at: clock() - EXPIRY - 3_600_000, run_after: clock() })
    .where('id', '=', delayed.id)
    .execute();
  clock.advance(60_000);
  // Then a deep, young backlog.
  for (let done = 0; done < BACKLOG; done += 1000)
    await engine.submitMany(
      'deep',
      Array.from({ length: 1000 }, (_, i) => ({ message: `young ${done + i}` })),
      'test',
    );
}, 120_000);
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

/** The sweep's read as the reaper sends it (expire.ts), planned by the store. */
async function sweepPlan(cutoff: number): Promise<string> {
  const query = ts.store.db
    .selectFrom('executions')
    .selectAll()
    .where((eb) => waitingSince(eb, cutoff))
    .limit(50)
    .compile();
  if (ts.store.kind === 'sqlite') {
    const out = await ts.store.db.executeQuery<{ detail: string }>(
      CompiledQuery.raw(`EXPLAIN QUERY PLAN ${query.sql}`, [...query.parameters]),
    );
    return out.rows.map((r) => r.detail).join('\n');
  }
  const out = await ts.store.db.executeQuery<{ 'QUERY PLAN': string }>(
    CompiledQuery.raw(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) ${query.sql}`, [...query.parameters]),
  );
  return out.rows.map((r) => r['QUERY PLAN']).join('\n');
}

describe(`the backlog-expiry sweep under a deep backlog (${STORE_KIND})`, () => {
  it('reads the rows created before the cutoff, not every queued row', async () => {
    const plan = await sweepPlan(clock() - EXPIRY);
    if (ts.store.kind === 'sqlite') {
      expect(plan).toMatch(/USING (COVERING )?INDEX executions_status_recent \(status=\? AND created_at<\?\)/);
    } else {
      expect(plan).toMatch(/Index Cond: .*created_at < /);
      // Only the four old rows were read (three stale, one delayed), never the 12,000 young ones.
      const read = [...plan.matchAll(/Index Scan.*\(actual rows=(\d+)/g)].map((m) => Number(m[1]));
      expect(read.length).toBeGreaterThan(0);
      for (const rows of read) expect(rows).toBeLessThanOrEqual(4);
    }
  });

  it('still fails exactly the stale rows', async () => {
    const reaped = await engine.reapOnce();
    expect(
      reaped
        .filter((r) => r.kind === 'backlog_expired')
        .map((r) => r.id)
        .sort(),
    ).toEqual([...old].sort());
    const left = await ts.store.db
      .selectFrom('executions')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('status', '=', 'queued')
      .executeTakeFirstOrThrow();
    expect(Number(left.n)).toBe(BACKLOG + 1);
  });
});
