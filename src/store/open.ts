import { join } from 'node:path';
import type { StoreAdapter } from './adapter.ts';
import { openPostgres } from './postgres.ts';
import { openSqlite } from './sqlite.ts';

export interface OpenStoreOptions {
  /** postgres://… selects PostgreSQL; otherwise SQLite in `dataDir`. */
  databaseUrl?: string;
  dataDir: string;
  /** PostgreSQL schema (tests). */
  schema?: string;
  poolMax?: number;
  /**
   * SQLite: this process serves the store (`baton up`): it takes the one-server lock, held until the
   * store closes, and fails if another process holds it (sqlite-lock.ts). PostgreSQL: no effect.
   */
  serve?: boolean;
}

export function openStore(opts: OpenStoreOptions): StoreAdapter {
  const url = opts.databaseUrl;
  if (url && /^postgres(ql)?:\/\//.test(url)) {
    return openPostgres({ url, schema: opts.schema, poolMax: opts.poolMax });
  }
  if (url && !url.startsWith('sqlite:'))
    throw new Error(`BATON_DATABASE_URL must start with postgres:// or sqlite: (got '${url.split(':')[0]}:…')`);
  return openSqlite(sqliteFile(opts)!, { serve: opts.serve });
}

/** The SQLite file these options open (sqlite:FILE, or baton.sqlite in the data dir); undefined for PostgreSQL. */
export function sqliteFile(opts: Pick<OpenStoreOptions, 'databaseUrl' | 'dataDir'>): string | undefined {
  const url = opts.databaseUrl;
  if (url && url.startsWith('sqlite:')) return url.slice('sqlite:'.length);
  return url ? undefined : join(opts.dataDir, 'baton.sqlite');
}
