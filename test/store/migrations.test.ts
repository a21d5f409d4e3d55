import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { loadLegacyMigrations, loadMigrations, migrationPlan } from '../../src/store/migrations.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { openSqlite } from '../../src/store/sqlite.ts';
import { PG_URL, STORE_KIND } from '../helpers/store.ts';

const opened: StoreAdapter[] = [];
const schema = `t_mig_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
const dir = mkdtempSync(join(tmpdir(), 'baton-mig-'));

function open(): StoreAdapter {
  const s = STORE_KIND === 'postgres' ? openPostgres({ url: PG_URL, schema, poolMax: 2 }) : openSqlite(join(dir, 'baton.sqlite'));
  opened.push(s);
  return s;
}

afterAll(async () => {
  await Promise.all(opened.map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
  if (STORE_KIND === 'postgres') {
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.end();
  }
});

describe(`migrations (${STORE_KIND})`, () => {
  it('four stores starting at once apply each migration exactly once', async () => {
    const known = loadMigrations(STORE_KIND).map((m) => m.version);
    const stores = [open(), open(), open(), open()];
    const results = await Promise.all(stores.map((s) => s.migrate()));
    expect(results.flat().sort((a, b) => a - b)).toEqual(known); // numerically: 10 after 9
    expect(results.filter((r) => r.length > 0)).toHaveLength(1);
    const rows = await stores[0]!.db.selectFrom('baton_migrations').select('version').orderBy('version').execute();
    expect(rows.map((r) => Number(r.version))).toEqual(known);
    for (const s of stores) expect(await s.migrationStatus()).toEqual({ applied: known, known });
    // Starting again finds nothing to do.
    expect(await open().migrate()).toEqual([]);
  });
});

describe('one version line', () => {
  const versions = (kind: 'postgres' | 'sqlite') => loadMigrations(kind).map((m) => m.version);

  it('both folders list the same versions (a version one store needs nothing for is a comment-only file)', () => {
    expect(versions('postgres')).toEqual(versions('sqlite'));
    const names = (kind: 'postgres' | 'sqlite') => loadMigrations(kind).map((m) => `${m.version}_${m.name}`);
    expect(names('postgres')).toEqual(names('sqlite'));
  });

  it("each baseline replaces exactly its dialect's legacy chain", () => {
    for (const kind of ['postgres', 'sqlite'] as const) {
      const [baseline] = loadMigrations(kind);
      expect(baseline!.replaces).toEqual(loadLegacyMigrations(kind).map((m) => m.version));
    }
  });

  it('a new store gets the baseline; an old one the rest of its chain, then the baseline recorded unrun', () => {
    const line = loadMigrations(STORE_KIND);
    const baseline = line[0]!;
    const step = (s: { migration: { version: number }; run: boolean }) => [s.migration.version, s.run];
    expect(migrationPlan(STORE_KIND, new Set()).map(step)).toEqual(line.map((m) => [m.version, true]));
    const legacy = loadLegacyMigrations(STORE_KIND).map((m) => m.version);
    expect(migrationPlan(STORE_KIND, new Set(legacy.slice(0, 5))).map(step)).toEqual([
      ...legacy.slice(5).map((v) => [v, true]),
      [baseline.version, false],
      ...line.slice(1).map((m) => [m.version, true]),
    ]);
    expect(migrationPlan(STORE_KIND, new Set([...legacy, ...line.map((m) => m.version)]))).toEqual([]);
  });
});
