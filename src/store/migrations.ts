import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { StoreKind } from './adapter.ts';

export interface Migration {
  version: number;
  name: string;
  sql: string;
  /** The legacy versions this migration stands for (a baseline's `-- replaces legacy A-B` header); else empty. */
  replaces: number[];
}

/**
 * The migrations, one folder per store: `NNNN_name.sql`, append-only, one version line shared by
 * both stores (a version one store needs nothing for is a comment-only file in its folder). The
 * line starts at a baseline that creates the whole schema at once; the chains it folded stay in
 * `legacy/`, run only to bring a store made before the baseline up to it (see migrationPlan).
 */
export function loadMigrations(kind: StoreKind): Migration[] {
  const line = readFolder(kind, '');
  const baselines = line.filter((m) => m.replaces.length > 0);
  for (const b of baselines) {
    const below = line.find((m) => m.version < b.version);
    if (below)
      throw new Error(
        `migration ${kind}/${below.version}_${below.name}.sql is numbered below the baseline ${b.version}: number it after the latest`,
      );
  }
  return line;
}

/** The folded chain: run only on a store that had some of it applied before the baseline existed. */
export function loadLegacyMigrations(kind: StoreKind): Migration[] {
  return readFolder(kind, 'legacy/');
}

export interface MigrationStep {
  migration: Migration;
  /** False for a baseline recorded over the legacy chain that already built its schema. */
  run: boolean;
}

/**
 * What migrate() does, in order, on a store whose baton_migrations holds `done`. A store with
 * none of a baseline's legacy versions gets the baseline; one with some gets the rest of its
 * legacy chain, then the baseline recorded without running (the chain built the same schema);
 * later versions run as usual. Every step is recorded in baton_migrations, under one lock.
 */
export function migrationPlan(kind: StoreKind, done: ReadonlySet<number>): MigrationStep[] {
  const steps: MigrationStep[] = [];
  for (const m of loadMigrations(kind)) {
    if (done.has(m.version)) continue;
    if (m.replaces.some((v) => done.has(v))) {
      const legacy = loadLegacyMigrations(kind);
      for (const l of legacy) if (m.replaces.includes(l.version) && !done.has(l.version)) steps.push({ migration: l, run: true });
      steps.push({ migration: m, run: false });
    } else steps.push({ migration: m, run: true });
  }
  return steps;
}

/**
 * migrationStatus() from the versions a store recorded: legacy versions a baseline stands for are
 * not reported (the baseline is), so a store upgraded through the legacy chain reads as current.
 */
export function migrationStatusOf(kind: StoreKind, recorded: number[]): { applied: number[]; known: number[] } {
  const line = loadMigrations(kind);
  const replaced = new Set(line.flatMap((m) => m.replaces));
  return { applied: recorded.filter((v) => !replaced.has(v)), known: line.map((m) => m.version) };
}

function readFolder(kind: StoreKind, sub: string): Migration[] {
  const dir = fileURLToPath(new URL(`./migrations/${kind}/${sub}`, import.meta.url));
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((f) => {
      const sql = readFileSync(dir + f, 'utf8');
      const range = /^-- replaces legacy (\d+)-(\d+)$/m.exec(sql);
      const replaces = range ? Array.from({ length: Number(range[2]) - Number(range[1]) + 1 }, (_, i) => Number(range[1]) + i) : [];
      return { version: Number(f.slice(0, 4)), name: f.slice(5, -4), sql, replaces };
    });
}

export const MIGRATIONS_TABLE_SQL =
  'CREATE TABLE IF NOT EXISTS baton_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)';
