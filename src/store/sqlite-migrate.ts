import type Database from 'better-sqlite3';
import { migrationPlan, migrationStatusOf, MIGRATIONS_TABLE_SQL } from './migrations.ts';

/**
 * Apply pending migrations on the writer connection (see migrationPlan). BEGIN IMMEDIATE takes
 * the write lock: every process starting at once queues on it; the first applies, the rest find
 * nothing to do. Returns the versions recorded.
 */
export function migrateSqlite(raw: Database.Database, file: string): number[] {
  raw.exec('BEGIN IMMEDIATE');
  try {
    raw.exec(MIGRATIONS_TABLE_SQL);
    const done = new Set(
      raw
        .prepare('SELECT version FROM baton_migrations')
        .all()
        .map((r: any) => r.version as number),
    );
    const applied: number[] = [];
    for (const { migration: m, run } of migrationPlan('sqlite', done)) {
      if (run) applyMigration(raw, m.sql);
      raw.prepare('INSERT INTO baton_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, Date.now());
      applied.push(m.version);
    }
    raw.exec('COMMIT');
    // A database made before incremental auto-vacuum existed gets it once, by a VACUUM
    // (it rewrites the file: seconds per 100 MiB, at start, before anything is served).
    if (file !== ':memory:' && raw.pragma('auto_vacuum', { simple: true }) !== 2) {
      raw.pragma('auto_vacuum = INCREMENTAL');
      // VACUUM copies the whole database into a temporary one first: a file, not memory.
      raw.pragma('temp_store = FILE');
      try {
        raw.exec('VACUUM');
      } finally {
        raw.pragma('temp_store = MEMORY');
      }
    }
    return applied;
  } catch (err) {
    if (raw.inTransaction) raw.exec('ROLLBACK');
    throw err;
  }
}

export function sqliteMigrationStatus(raw: Database.Database): { applied: number[]; known: number[] } {
  const exists = raw.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'baton_migrations'").get();
  const recorded = exists
    ? raw
        .prepare('SELECT version FROM baton_migrations ORDER BY version')
        .all()
        .map((r: any) => r.version as number)
    : [];
  return migrationStatusOf('sqlite', recorded);
}

/**
 * Run one migration's SQL. A migration that widens a CHECK constraint edits the table's stored
 * definition (PRAGMA writable_schema, the procedure SQLite documents for constraint changes that
 * leave stored rows valid): that needs better-sqlite3's unsafe mode for the step, and a new
 * schema_version so every other connection re-reads the schema.
 */
export function applyMigration(raw: Database.Database, sqlText: string): void {
  if (!/PRAGMA\s+writable_schema\s*=\s*ON/i.test(sqlText)) {
    raw.exec(sqlText);
    return;
  }
  const version = raw.pragma('schema_version', { simple: true }) as number;
  raw.unsafeMode(true);
  try {
    raw.exec(sqlText);
    raw.pragma(`schema_version = ${version + 1}`);
  } finally {
    raw.pragma('writable_schema = OFF');
    raw.unsafeMode(false);
  }
}
