import { sql, type Kysely } from 'kysely';
import type { DB } from '../../src/store/schema.ts';

/** Per index of the store's executions table (PostgreSQL, the connection's schema): scans, entries read, buffers touched. */
export type IndexUse = Map<string, { scans: number; read: number; blocks: number }>;

/** The statistics views of executions' indexes now (they lag by up to the stats flush, about a second). */
export async function pgIndexUse(db: Kysely<DB>): Promise<IndexUse> {
  await sql`SELECT pg_stat_force_next_flush()`.execute(db).catch(() => undefined);
  const { rows } = await sql<{ ix: string; scans: string; read: string; blocks: string }>`
    SELECT i.indexrelname AS ix, i.idx_scan AS scans, i.idx_tup_read AS read, io.idx_blks_hit + io.idx_blks_read AS blocks
    FROM pg_stat_user_indexes i JOIN pg_statio_user_indexes io USING (indexrelid)
    WHERE i.schemaname = current_schema() AND i.relname = 'executions'`.execute(db);
  return new Map(rows.map((r) => [r.ix, { scans: Number(r.scans), read: Number(r.read), blocks: Number(r.blocks) }]));
}

/** What each index did between two readings, per task, busiest first (lines to log). */
export function indexUseLines(before: IndexUse, after: IndexUse, tasks: number): string[] {
  const out: Array<[string, number, number, number]> = [];
  for (const [ix, a] of after) {
    const b = before.get(ix) ?? { scans: 0, read: 0, blocks: 0 };
    const d: [string, number, number, number] = [ix, a.scans - b.scans, a.read - b.read, a.blocks - b.blocks];
    if (d[1] || d[2] || d[3]) out.push(d);
  }
  out.sort((x, y) => y[3] - x[3]);
  return out.map(
    ([ix, s, r, bl]) =>
      `    ${ix.padEnd(34)} scans ${(s / tasks).toFixed(3)}, entries read ${(r / tasks).toFixed(2)}, buffers ${(bl / tasks).toFixed(2)} a task (${s} scans)`,
  );
}
