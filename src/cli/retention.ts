import { InvalidArgumentError, type Command } from 'commander';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { readEnv } from '../config.ts';

/** `--before 2026-01-01` (UTC midnight) or any ISO-8601 date-time. */
export function parseBefore(v: string): number {
  const t = /^\d{4}-\d{2}-\d{2}$/.test(v) ? Date.parse(`${v}T00:00:00Z`) : /^\d{4}-\d{2}-\d{2}T/.test(v) ? Date.parse(v) : NaN;
  if (!Number.isFinite(t)) throw new InvalidArgumentError('--before must be a date (2026-01-01, UTC) or an ISO-8601 date-time');
  return t;
}

/** `baton export`: read the store directly (like `baton migrate`), never through the server. */
export function registerRetentionCommands(program: Command): void {
  program
    .command('export')
    .description(
      'write terminal executions finished before a date, with events and logs, as gzip JSON lines (the archive format); deletes nothing',
    )
    .requiredOption('--before <date>', 'finished before this date (2026-01-01 is UTC midnight) or ISO-8601 date-time', parseBefore)
    .requiredOption('--out <file>', 'the file to write (gzip; must not exist)')
    .action(async (_o, cmd: Command) => {
      const o = cmd.optsWithGlobals() as { before: number; out: string; dataDir?: string; json?: boolean };
      const env = readEnv();
      const [{ openStore, sqliteFile }, { exportHistory }] = await Promise.all([
        import('../store/open.ts'),
        import('../retention/export.ts'),
      ]);
      const where = { databaseUrl: env.databaseUrl, dataDir: o.dataDir ?? env.dataDir };
      // Opening a missing SQLite file would create an empty store there; export only reads.
      const file = sqliteFile(where);
      if (file && !existsSync(file))
        throw new Error(`no SQLite store at ${file} (set --data-dir or BATON_DATA_DIR to the server's, or BATON_DATABASE_URL)`);
      const store = openStore({ ...where, schema: env.pgSchema, poolMax: 2 });
      try {
        const r = await exportHistory({ store, before: o.before, out: resolve(o.out) });
        const line = `exported ${r.executions} executions (${r.events} events, ${r.logs} log lines) finished before ${new Date(o.before).toISOString()} to ${r.file} (${r.bytes} bytes gzip)`;
        process.stdout.write((o.json ? JSON.stringify({ ...r, before: new Date(o.before).toISOString() }, null, 2) : line) + '\n');
      } finally {
        await store.close();
      }
    });
}
