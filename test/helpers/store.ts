import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe } from 'vitest';
import type { StoreAdapter, StoreKind } from '../../src/store/adapter.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { openSqlite, type SqliteOptions } from '../../src/store/sqlite.ts';

export const STORE_KIND: StoreKind = process.env.BATON_TEST_STORE === 'postgres' ? 'postgres' : 'sqlite';
export const PG_URL = process.env.BATON_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** Capability-named skip: tests that need several processes sharing one database. */
export const describeMultiProcess = STORE_KIND === 'postgres' ? describe : describe.skip;

/**
 * Resolves once `listener` hears what `sender` publishes, i.e. its LISTEN is in place (issued on a
 * connection of its own when its first subscription starts). A fixed pause instead lost the
 * NOTIFYs a test sent next when a loaded machine took longer to connect.
 */
export async function untilHearing(listener: StoreAdapter, sender: StoreAdapter, timeoutMs = 15_000): Promise<void> {
  const probe = `listening-probe-${randomUUID()}`;
  let heard = false;
  const off = listener.subscribe('agent', (message) => {
    if (message === probe) heard = true;
  });
  try {
    for (const deadline = Date.now() + timeoutMs; !heard;) {
      if (Date.now() > deadline) throw new Error(`the listener heard nothing within ${timeoutMs} ms`);
      sender.publish('agent', probe);
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    off();
  }
}

/**
 * Whether a test of the running file failed: test/setup/each-file.ts clears it as each file
 * starts and sets it after a failed test (a hook here, at module level, would be registered by the
 * first file only: the files a Vitest worker runs share their modules, vitest.config.ts).
 */
export const thisFile = { failed: false };

export interface TestStore {
  store: StoreAdapter;
  /** How another process reaches the same database: env for `baton` / child scripts. */
  env: Record<string, string>;
  /** What a child process passes to openStore. */
  location: { databaseUrl?: string; schema?: string; dataDir: string };
  /** `startNode({ env })` for an in-process `baton up` on this store, on a free port. */
  nodeEnv: { dataDir: string; databaseUrl: string | undefined; pgSchema?: string; port: 0; host: '127.0.0.1' };
  cleanup(): Promise<void>;
}

/**
 * A fresh, migrated store for one test file: a new SQLite file, or a new PostgreSQL schema.
 * A file with a failed test keeps its data for inspection (the path is printed).
 */
export async function openTestStore(opts: { poolMax?: number; sqlite?: SqliteOptions } = {}): Promise<TestStore> {
  const dataDir = mkdtempSync(join(tmpdir(), 'baton-test-'));
  if (STORE_KIND === 'sqlite') {
    const store = openSqlite(join(dataDir, 'baton.sqlite'), opts.sqlite);
    await store.migrate();
    return {
      store,
      env: { BATON_DATA_DIR: dataDir },
      location: { dataDir },
      nodeEnv: { dataDir, databaseUrl: undefined, port: 0, host: '127.0.0.1' },
      async cleanup() {
        await store.close();
        if (thisFile.failed) console.error(`kept failed test data in ${dataDir}`);
        else rmSync(dataDir, { recursive: true, force: true });
      },
    };
  }
  const schema = `t_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
  const store = openPostgres({ url: PG_URL, schema, poolMax: opts.poolMax });
  await store.migrate();
  return {
    store,
    env: { BATON_DATA_DIR: dataDir, BATON_DATABASE_URL: PG_URL, BATON_PG_SCHEMA: schema },
    location: { databaseUrl: PG_URL, schema, dataDir },
    nodeEnv: { dataDir, databaseUrl: PG_URL, pgSchema: schema, port: 0, host: '127.0.0.1' },
    async cleanup() {
      await store.close();
      if (thisFile.failed) {
        console.error(`kept failed test data in PostgreSQL schema ${schema}`);
        return;
      }
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
