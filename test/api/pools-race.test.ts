import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import { Engine } from '../../src/engine/engine.ts';
import { describeMultiProcess, openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';

// A pool deleted while an agent joins it: one of the two wins and the other gets a 4xx naming
// why (400 naming `pools`: no such pool; 409 pool_in_use naming the agent), never a 500 from a
// broken foreign key, and never half of either written.

let ts: TestStore;
let engine: Engine;
let app: FastifyInstance;
let admin: string;
let n = 0;

async function call(method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown) {
  const res = await app.inject({ method, url, payload: payload as never, headers: { authorization: `Bearer ${admin}` } });
  return { status: res.statusCode, body: JSON.parse(res.body || 'null') };
}

beforeAll(async () => {
  ts = await openTestStore({ poolMax: 6 });
  engine = new Engine({ store: ts.store, nodeId: 'pools-race-test' });
  const keys = new KeyStore(ts.store);
  app = await buildServer({ engine, keys, logger: false });
  admin = (await keys.create({ name: 'admin', scope: 'admin' }, 'test')).key;
});
afterAll(async () => {
  await app?.close();
  engine?.close();
  await ts?.cleanup();
});

/** The agent's pools as stored, both ways: its column and its agent_pools rows. */
async function poolsOf(agent: string): Promise<{ column: string[]; rows: string[] }> {
  const got = await call('GET', `/v1/agents/${agent}`);
  const rows = await ts.store.db.selectFrom('agent_pools').select('pool').where('agent', '=', agent).orderBy('pool').execute();
  return { column: got.body.pools ?? [], rows: rows.map((r) => r.pool) };
}

describe(`a pool deleted while an agent joins it (${STORE_KIND})`, () => {
  it('answers one of them and refuses the other with a 4xx, on join, on create, and again', async () => {
    for (let i = 0; i < 12; i++) {
      const pool = `race-${++n}`;
      const agent = `joiner-${n}`;
      expect((await call('POST', '/v1/pools', { name: pool, max_parallel: 2 })).status).toBe(201);
      const joinBy =
        i % 2 === 0
          ? (await call('POST', '/v1/agents', { name: agent }), () => call('PATCH', `/v1/agents/${agent}`, { pools: [pool] }))
          : () => call('POST', '/v1/agents', { name: agent, pools: [pool] });
      const [joined, deleted] = await Promise.all([joinBy(), call('DELETE', `/v1/pools/${pool}`)]);
      const ok = (s: number) => s >= 200 && s < 300;
      // Exactly one wins.
      expect([ok(joined.status), ok(deleted.status)].filter(Boolean), JSON.stringify({ joined, deleted })).toHaveLength(1);
      if (ok(deleted.status)) {
        expect([joined.status, joined.body.error]).toEqual([400, 'validation_error']);
        expect(joined.body.message).toContain('pools');
        expect(joined.body.missing).toEqual([pool]);
      } else {
        expect([deleted.status, deleted.body.error, deleted.body.agents]).toEqual([409, 'pool_in_use', [agent]]);
      }
      const stored = await poolsOf(agent);
      const exists = (await call('GET', `/v1/pools/${pool}`)).status === 200;
      expect(stored).toEqual(ok(joined.status) ? { column: [pool], rows: [pool] } : { column: [], rows: [] });
      expect(exists).toBe(!ok(deleted.status));
    }
  });
});

describe(`pools and agents made twice at once (${STORE_KIND})`, () => {
  it('one create wins, the other answers 409 already_exists', async () => {
    for (const [url, body] of [
      ['/v1/pools', { name: `twice-${++n}` }],
      ['/v1/agents', { name: `twice-${++n}` }],
    ] as const) {
      const answers = await Promise.all([call('POST', url, body), call('POST', url, body), call('POST', url, body)]);
      expect(answers.map((a) => a.status).sort(), JSON.stringify(answers)).toEqual([201, 409, 409]);
      expect(answers.filter((a) => a.status === 409).map((a) => a.body.error)).toEqual(['already_exists', 'already_exists']);
    }
  });
});

describeMultiProcess('a pool deleted while an agent joins it, interleaved by hand (PostgreSQL)', () => {
  it('the join waits on the deletion and then finds no pool: 400 naming pools, the agent unchanged', async () => {
    const pool = `held-${++n}`;
    const agent = `waiter-${n}`;
    await call('POST', '/v1/pools', { name: pool });
    await call('POST', '/v1/agents', { name: agent });
    // Another process deletes the pool (its members checked: none) and has not committed yet.
    const other = new pg.Client({ connectionString: PG_URL });
    await other.connect();
    try {
      await other.query(`SET search_path TO ${ts.location.schema}`);
      await other.query('BEGIN');
      await other.query('SELECT name FROM pools WHERE name = $1 FOR UPDATE', [pool]);
      await other.query('DELETE FROM pools WHERE name = $1', [pool]);
      const join = call('PATCH', `/v1/agents/${agent}`, { pools: [pool] });
      // The join is waiting on the pool's row lock (a lock not granted, on this schema's pools).
      for (;;) {
        const { rows } = await other.query(
          `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
           JOIN pg_namespace s ON s.oid = c.relnamespace
           WHERE NOT l.granted AND s.nspname = $1 AND c.relname = 'pools'`,
          [ts.location.schema],
        );
        const { rows: tuple } = await other.query(
          `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple')`,
        );
        if (rows[0].n + tuple[0].n > 0) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      await other.query('COMMIT');
      const answer = await join;
      expect([answer.status, answer.body.error, answer.body.missing]).toEqual([400, 'validation_error', [pool]]);
      expect(await poolsOf(agent)).toEqual({ column: [], rows: [] });
    } finally {
      await other.end();
    }
  });
});
