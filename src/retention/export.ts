/**
 * `baton export --before <date> --out <file>`: write every terminal execution finished before
 * the date, with its events and logs, in the archive's format (gzip JSON lines, one member per
 * chunk) — without deleting anything. Reads go through `store.reader` in keyset chunks over
 * executions_completed, so an export of any size never holds the writer or the event loop.
 */
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { isTerminal } from '../domain/states.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import { appendMember, gzipMember, readRecords, toLines } from './archive.ts';

/** Executions per chunk (one read round and one gzip member). */
export const EXPORT_CHUNK = 500;

export interface ExportResult {
  file: string;
  executions: number;
  events: number;
  logs: number;
  bytes: number;
}

export async function exportHistory(o: { store: StoreAdapter; before: number; out: string; chunk?: number }): Promise<ExportResult> {
  if (existsSync(o.out)) throw new Error(`${o.out} exists; export writes a new file (remove it, or choose another name)`);
  if (!existsSync(dirname(o.out))) throw new Error(`${dirname(o.out)} does not exist; export writes its file into an existing directory`);
  const chunk = o.chunk ?? EXPORT_CHUNK;
  const checked = new Set<string>();
  const result: ExportResult = { file: o.out, executions: 0, events: 0, logs: 0, bytes: 0 };
  let after: { completedAt: number; id: string } | undefined;
  for (;;) {
    let q = o.store.reader
      .selectFrom('executions')
      .select(['id', 'status', 'completed_at'])
      .where('completed_at', 'is not', null)
      .where('completed_at', '<', o.before);
    if (after) {
      const { completedAt: c, id } = after;
      q = q.where('completed_at', '>=', c).where((eb) => eb.or([eb('completed_at', '>', c), eb('id', '>', id)]));
    }
    const rows = await q.orderBy('completed_at').orderBy('id').limit(chunk).execute();
    if (rows.length === 0) break;
    const last = rows[rows.length - 1]!;
    after = { completedAt: Number(last.completed_at), id: last.id };
    const ids = rows.filter((r) => isTerminal(r.status)).map((r) => r.id);
    const records = await readRecords(o.store.reader, ids);
    if (records.length) {
      result.bytes += await appendMember(o.out, await gzipMember(await toLines(records)), checked);
      result.executions += records.length;
      for (const r of records) {
        result.events += r.events.length;
        result.logs += r.logs.length;
      }
    }
    if (rows.length < chunk) break;
  }
  if (result.executions === 0) result.bytes += await appendMember(o.out, await gzipMember(Buffer.alloc(0)), checked);
  return result;
}
