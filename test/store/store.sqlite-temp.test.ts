/**
 * Where SQLite keeps a statement's scratch b-trees (RETURNING's rows, an IN (subquery), a sort):
 * in memory on the main connection (src/store/sqlite.ts, `temp_store`), except for the one
 * VACUUM that gives an old database incremental auto-vacuum, whose copy of the whole database
 * goes to a temporary file. A new database needs no VACUUM: it has the setting from its first
 * page. PostgreSQL has none of these settings.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { openSqlite } from '../../src/store/sqlite.ts';
import { openTestStore, STORE_KIND } from '../helpers/store.ts';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A numeric setting of the store's main connection: auto_vacuum (2 incremental), temp_store (2 memory, 1 file). */
async function setting(store: StoreAdapter, name: 'auto_vacuum' | 'temp_store'): Promise<number> {
  const { rows } = await sql.raw<Record<string, number>>(`PRAGMA ${name}`).execute(store.db);
  return Number(rows[0]![name]);
}

describe.runIf(STORE_KIND === 'sqlite')('SQLite scratch b-trees', () => {
  it('are kept in memory on the main connection', async () => {
    const ts = await openTestStore();
    try {
      expect(await setting(ts.store, 'temp_store')).toBe(2);
    } finally {
      await ts.cleanup();
    }
  });

  it('a new database has incremental auto-vacuum from its first page, with no VACUUM', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'baton-test-'));
    dirs.push(dir);
    const store = openSqlite(join(dir, 'baton.sqlite'));
    try {
      // Before any migration: set before the switch to WAL wrote the file's header.
      expect(await setting(store, 'auto_vacuum')).toBe(2);
      await store.migrate();
      expect(await setting(store, 'auto_vacuum')).toBe(2);
      expect(await setting(store, 'temp_store')).toBe(2);
    } finally {
      await store.close();
    }
  });

  it('go back to memory after the VACUUM that gives a database from before incremental auto-vacuum its setting', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'baton-test-'));
    dirs.push(dir);
    const file = join(dir, 'baton.sqlite');
    // A database with a table and no auto-vacuum: the setting can then only come by a VACUUM.
    const old = new Database(file);
    old.exec('CREATE TABLE kept (x TEXT)');
    old.prepare('INSERT INTO kept (x) VALUES (?)').run('still here');
    expect(old.pragma('auto_vacuum', { simple: true })).toBe(0);
    old.close();

    const store = openSqlite(file);
    try {
      expect((await store.migrate()).length).toBeGreaterThan(0);
      expect(await setting(store, 'auto_vacuum')).toBe(2); // the VACUUM ran
      expect(await setting(store, 'temp_store')).toBe(2);
      const kept = await sql<{ x: string }>`SELECT x FROM kept`.execute(store.db);
      expect(kept.rows).toEqual([{ x: 'still here' }]);
    } finally {
      await store.close();
    }
  });
});
