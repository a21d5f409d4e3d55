import { NotFound } from '../domain/errors.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import type { ExecutionLogRow } from '../store/schema.ts';
import { redactSecrets } from '../domain/redact.ts';
import type { EngineContext } from './context.ts';
import { checkLease, lockExecution } from './transitions/lease.ts';

/**
 * Execution logs: output lines a worker (or the push dispatcher) sends while a task runs.
 * Appends are fenced by the lease token like every other worker write, and never touch the
 * execution's status. They take the execution's row lock, so sequence numbers are gap-free
 * and ordered per execution even with several senders.
 */

export const LOG_LIMITS = Object.freeze({
  /** Lines kept per execution, the truncation marker included. */
  maxLines: 10_000,
  /** Bytes (UTF-8) kept per execution. A chatty task cannot fill the database. */
  maxBytes: 5 * 1024 * 1024,
  /** One line longer than this is cut (and marked). */
  maxLineBytes: 16 * 1024,
});
export type LogLimits = { maxLines: number; maxBytes: number; maxLineBytes: number };

export type LogStream = 'stdout' | 'stderr' | 'system';
export interface LogLineInput {
  stream: LogStream;
  line: string;
}
export interface AppendResult {
  /** Lines stored by this call (a truncation marker counts). */
  accepted: number;
  /** Lines dropped because the execution's log reached its bounds. */
  dropped: number;
  truncated: boolean;
}

export const TRUNCATION_MARKER = (l: LogLimits) =>
  `[baton] log truncated: the limit of ${l.maxLines} lines / ${Math.round(l.maxBytes / 1024)} KiB per execution was reached; later lines were dropped`;

/** Text as stored: no NUL (PostgreSQL text cannot hold it), no CR, secrets redacted, length cut. */
export function cleanLine(line: string, maxLineBytes: number): string {
  let s = line.replace(/\u0000/g, '\uFFFD').replace(/\r$/, '');
  if (Buffer.byteLength(s) > maxLineBytes) {
    // Cut on a character boundary: take a prefix that fits, then mark it.
    let cut = s.slice(0, maxLineBytes);
    while (Buffer.byteLength(cut) > maxLineBytes - 32) cut = cut.slice(0, Math.floor(cut.length * 0.9));
    s = `${cut}… [line cut at ${maxLineBytes} bytes]`;
  }
  return redactSecrets(s);
}

/**
 * Append lines to an execution's log if `token` is its current lease token. A row that went
 * back to the queue with that token still accepts them (a slow worker's last lines land, as its
 * result would); after a new claim or a terminal status, LeaseLost.
 */
export async function appendLogs(
  store: StoreAdapter,
  id: string,
  token: string,
  lines: LogLineInput[],
  now: number,
  limits: LogLimits = LOG_LIMITS,
): Promise<AppendResult> {
  const out = await store.transaction(async (tx) => {
    const row = await lockExecution(tx, store, id);
    checkLease(row, token, true);
    if (lines.length === 0) return { accepted: 0, dropped: 0, truncated: false };
    await tx
      .insertInto('execution_log_heads')
      .values({ execution_id: id, lines: 0, bytes: 0, truncated: 0 })
      .onConflict((oc) => oc.column('execution_id').doNothing())
      .execute();
    const head = await tx.selectFrom('execution_log_heads').selectAll().where('execution_id', '=', id).executeTakeFirstOrThrow();
    if (head.truncated) return { accepted: 0, dropped: lines.length, truncated: true };

    let count = Number(head.lines);
    let bytes = Number(head.bytes);
    let truncated = false;
    const rows: ExecutionLogRow[] = [];
    for (const input of lines) {
      const line = cleanLine(input.line, limits.maxLineBytes);
      const size = Buffer.byteLength(line);
      // One line is always kept free for the marker.
      if (count + 1 >= limits.maxLines || bytes + size > limits.maxBytes) {
        rows.push({ execution_id: id, seq: ++count, at: now, stream: 'system', line: TRUNCATION_MARKER(limits) });
        truncated = true;
        break;
      }
      rows.push({ execution_id: id, seq: ++count, at: now, stream: input.stream, line });
      bytes += size;
    }
    // Large batches go in chunks: PostgreSQL allows at most 65,535 bind parameters per statement.
    for (let i = 0; i < rows.length; i += 500)
      await tx
        .insertInto('execution_logs')
        .values(rows.slice(i, i + 500))
        .execute();
    await tx
      .updateTable('execution_log_heads')
      .set({ lines: count, bytes, truncated: truncated ? 1 : 0 })
      .where('execution_id', '=', id)
      .execute();
    const kept = truncated ? rows.length - 1 : rows.length;
    return { accepted: rows.length, dropped: lines.length - kept, truncated };
  });
  if (out.accepted > 0) store.publish('log', id);
  return out;
}

export interface LogPage {
  lines: ExecutionLogRow[];
  truncated: boolean;
}

/** Lines with seq > `after`, oldest first. NotFound when the execution does not exist. */
export async function readLogs(store: StoreAdapter, id: string, opts: { after?: number; limit?: number } = {}): Promise<LogPage> {
  const db = store.db;
  const [lines, head] = await Promise.all([
    db
      .selectFrom('execution_logs')
      .selectAll()
      .where('execution_id', '=', id)
      .where('seq', '>', opts.after ?? 0)
      .orderBy('seq')
      .limit(opts.limit ?? 1000)
      .execute(),
    db.selectFrom('execution_log_heads').select('truncated').where('execution_id', '=', id).executeTakeFirst(),
  ]);
  if (lines.length === 0 && !head) {
    const exists = await db.selectFrom('executions').select('id').where('id', '=', id).executeTakeFirst();
    if (!exists) throw new NotFound('execution', id);
  }
  return { lines: lines.map((l) => ({ ...l, seq: Number(l.seq), at: Number(l.at) })), truncated: Boolean(head?.truncated) };
}

/** Execution logs as the engine's sub-service (`engine.logs`): what routes call instead of the store. */
export class Logs {
  constructor(private readonly engine: EngineContext) {}

  /** appendLogs at the engine's clock. */
  append(id: string, token: string, lines: LogLineInput[]): Promise<AppendResult> {
    return appendLogs(this.engine.store, id, token, lines, this.engine.now());
  }

  read(id: string, opts: { after?: number; limit?: number } = {}): Promise<LogPage> {
    return readLogs(this.engine.store, id, opts);
  }

  /** Calls `wake` whenever lines are appended to execution `id`, by any process. Returns the unsubscribe. */
  onAppend(id: string, wake: () => void): () => void {
    return this.engine.store.subscribe('log', (m) => m === id && wake());
  }
}
