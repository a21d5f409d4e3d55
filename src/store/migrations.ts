import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { StoreKind } from './adapter.ts';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Numbered plain-SQL migrations, one folder per store: `NNNN_name.sql`, append-only. */
export function loadMigrations(kind: StoreKind): Migration[] {
  const dir = fileURLToPath(new URL(`./migrations/${kind}/`, import.meta.url));
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((f) => ({
      version: Number(f.slice(0, 4)),
      name: f.slice(5, -4),
      sql: readFileSync(dir + f, 'utf8'),
    }));
}

export const MIGRATIONS_TABLE_SQL =
  'CREATE TABLE IF NOT EXISTS baton_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)';
