import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';

// PostgreSQL keeps every version of an agent row (its seat and backlog counters change twice per
// task) until no open snapshot can see it. While an old snapshot is open (the canary's cycle, a
// report, a dump), the versions pile up. The schema gives each agent row a page of its own
// (fillfactor 10), so they stay one chain on that page, read in one buffer; packed many agents to
// a page, the page filled, each later version went to another page with an index entry of its own,
// and every read of the agent walked them all (docs/benchmarks.md, "Deep backlogs and busy
// agents"). SQLite keeps no row versions.

let ts: TestStore;
let engine: Engine;
const AGENTS = Array.from({ length: 12 }, (_, i) => `apart-${i}`);

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'apart-test' });
  for (const name of AGENTS) await engine.agents.create({ name, max_parallel: 1, max_backlog: 100 }, 'test');
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

/** A connection of its own to the test's schema. */
async function connect(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${ts.location.schema}` });
  await client.connect();
  return client;
}

describe.skipIf(STORE_KIND !== 'postgres')('agent rows under an old snapshot (PostgreSQL)', () => {
  it('an agent row is read in a few buffers after many counter changes that no snapshot lets PostgreSQL prune', async () => {
    const reader = await connect();
    try {
      // An old snapshot, held through the work below.
      await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await reader.query('SELECT count(*) FROM agents');
      for (let round = 0; round < 25; round++) {
        for (const agent of AGENTS) {
          await engine.submit(agent, { message: `round ${round}` }, 'test');
          const [task] = await engine.claim(agent, { owner: 'w', max: 1 });
          expect(task, agent).toBeDefined();
          await engine.complete(task!.id, task!.lease_token!, { status: 'succeeded' }, 'w');
        }
      }
      const probe = await connect();
      try {
        for (const agent of [AGENTS[0]!, AGENTS[11]!]) {
          const { rows } = await probe.query(
            `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) SELECT running_count, queued_out FROM agents WHERE name = $1`,
            [agent],
          );
          const plan = rows.map((r) => r['QUERY PLAN'] as string).join('\n');
          const hit = Number(/Buffers: shared hit=(\d+)/.exec(plan)?.[1] ?? NaN);
          // Apart: 5 buffers here (the index, the agent's page, the pages its chain spilled to);
          // packed eleven to a page: 22.
          expect(hit, plan).toBeLessThanOrEqual(10);
        }
        const { rows } = await probe.query(`SELECT reloptions FROM pg_class WHERE oid = 'agents'::regclass`);
        expect(rows[0].reloptions).toContain('fillfactor=10');
      } finally {
        await probe.end();
      }
    } finally {
      await reader.query('ROLLBACK').catch(() => undefined);
      await reader.end();
    }
  });
});
