/**
 * Fresh, isolated databases for one benchmark phase: a new SQLite file in a new temp dir, or a
 * new PostgreSQL schema (plus a temp dir for the admin key file). `cleanup()` drops the schema
 * and removes the dir.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { StoreAdapter, StoreKind } from '../../src/store/adapter.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { openSqlite } from '../../src/store/sqlite.ts';

export interface BenchDb {
  kind: StoreKind;
  dataDir: string;
  /** PostgreSQL only. */
  url?: string;
  schema?: string;
  /** Environment for a `baton up` child process that serves this database. */
  env: Record<string, string>;
  /** Open (and migrate) a store on this database in this process. */
  open(opts?: { poolMax?: number }): Promise<StoreAdapter>;
  cleanup(): Promise<void>;
}

const live = new Set<BenchDb>();

export function freshDb(kind: StoreKind, pgUrl: string, label: string): BenchDb {
  const dataDir = mkdtempSync(join(tmpdir(), `baton-bench-${label}-`));
  if (kind === 'sqlite') {
    const file = join(dataDir, 'baton.sqlite');
    const db: BenchDb = {
      kind,
      dataDir,
      env: { BATON_DATA_DIR: dataDir },
      async open() {
        const store = openSqlite(file);
        await store.migrate();
        return store;
      },
      async cleanup() {
        live.delete(db);
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
    live.add(db);
    return db;
  }
  const schema = `bench_${label.replace(/[^a-z0-9_]/g, '_')}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 7)}`;
  const db: BenchDb = {
    kind,
    dataDir,
    url: pgUrl,
    schema,
    env: { BATON_DATA_DIR: dataDir, BATON_DATABASE_URL: pgUrl, BATON_PG_SCHEMA: schema },
    async open(opts = {}) {
      const store = openPostgres({ url: pgUrl, schema, poolMax: opts.poolMax });
      await store.migrate();
      return store;
    },
    async cleanup() {
      live.delete(db);
      const client = new pg.Client({ connectionString: pgUrl });
      await client.connect();
      try {
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      } finally {
        await client.end();
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  live.add(db);
  return db;
}

/** Last-resort cleanup (after an error or Ctrl-C). */
export async function cleanupAllDbs(): Promise<void> {
  for (const db of [...live])
    await db.cleanup().catch((err) => console.error(`cleanup of ${db.schema ?? db.dataDir} failed: ${err?.message ?? err}`));
}

/** Can we reach PostgreSQL at all? Returns its version string, or throws a readable error. */
export async function postgresVersion(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  await client.connect();
  try {
    const r = await client.query('SHOW server_version');
    return String(r.rows[0].server_version);
  } finally {
    await client.end();
  }
}

export interface Verification {
  by_status: Record<string, number>;
  executions: number;
  events: number;
  /** Executions delivered more than once (should be 0: nothing crashed). */
  redelivered: number;
  /** Admission events whose seats_in_use exceeded the cap (must be 0). */
  over_admissions: number;
  max_seats_in_use: number;
}

/** Read back what the run left in the database: every task succeeded once, the cap held. */
export async function verify(store: StoreAdapter, agentPrefix: string): Promise<Verification> {
  const like = `${agentPrefix}%`;
  const rows = await store.db
    .selectFrom('executions')
    .select(['status', (eb) => eb.fn.countAll<number>().as('n')])
    .where('agent', 'like', like)
    .groupBy('status')
    .execute();
  const by_status: Record<string, number> = {};
  let executions = 0;
  for (const r of rows) {
    by_status[r.status] = Number(r.n);
    executions += Number(r.n);
  }
  const { redelivered } = await store.db
    .selectFrom('executions')
    .select((eb) => eb.fn.countAll<number>().as('redelivered'))
    .where('agent', 'like', like)
    .where('attempt', '>', 1)
    .executeTakeFirstOrThrow();
  const ev = await store.db
    .selectFrom('execution_events')
    .select([
      (eb) => eb.fn.countAll<number>().as('events'),
      (eb) => eb.fn.max('seats_in_use').as('max_seats'),
      (eb) => eb.fn.sum<number>(eb.case().when('seats_in_use', '>', eb.ref('seat_cap')).then(1).else(0).end()).as('over'),
    ])
    .where('agent', 'like', like)
    .executeTakeFirstOrThrow();
  return {
    by_status,
    executions,
    events: Number(ev.events),
    redelivered: Number(redelivered),
    over_admissions: Number(ev.over ?? 0),
    max_seats_in_use: Number(ev.max_seats ?? 0),
  };
}
