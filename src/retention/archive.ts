/**
 * The history archive: pruned (or exported) executions as JSON lines, gzip-compressed.
 *
 * A file is a sequence of gzip members, one per batch; concatenated members are valid gzip
 * (`zcat file` prints every line). Each member carries its own length in a gzip extra field
 * (subfield `BL`, RFC 1952 FEXTRA), so a writer that finds a file left by a killed process can
 * walk member to member and cut a half-written tail — which belonged to a batch that was never
 * deleted (a member is fsynced before its rows go), so its executions are archived again by
 * the next batch. A crash duplicates a line; it never loses one, nor corrupts the lines after it.
 */
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync } from 'node:fs';
import { open, stat, truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gunzip, gzip } from 'node:zlib';
import type { Kysely } from 'kysely';
import { refuseNonDirectory } from '../config.ts';
import type { DB, ExecutionEventRow, ExecutionLogRow, ExecutionRow } from '../store/schema.ts';

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);

/** One archived execution: the row as stored, its event timeline and its log lines. */
export interface ArchiveRecord {
  /** Format version of the line. */
  v: 1;
  execution: ExecutionRow;
  events: ExecutionEventRow[];
  logs: ExecutionLogRow[];
}

/** Ids per read when gathering records: a few MiB per statement at most (results of a few KiB). */
const READ_CHUNK = 200;

/** Read the rows of `ids` (executions, their events and logs), in chunks, through `db` (use store.reader). */
export async function readRecords(db: Kysely<DB>, ids: readonly string[]): Promise<ArchiveRecord[]> {
  const out: ArchiveRecord[] = [];
  for (let i = 0; i < ids.length; i += READ_CHUNK) {
    const chunk = ids.slice(i, i + READ_CHUNK) as string[];
    const executions = await db.selectFrom('executions').selectAll().where('id', 'in', chunk).execute();
    const events = await db
      .selectFrom('execution_events')
      .selectAll()
      .where('execution_id', 'in', chunk)
      .orderBy('execution_id')
      .orderBy('id')
      .execute();
    // Only executions that logged have a log head (appendLogs writes it with the first line): the
    // lines are read for those alone. Few executions log, and an IN list of every id made
    // PostgreSQL expect a large share of execution_logs and scan it.
    const heads = await db.selectFrom('execution_log_heads').select('execution_id').where('execution_id', 'in', chunk).execute();
    const logged = heads.map((h) => h.execution_id);
    const logs = logged.length
      ? await db
          .selectFrom('execution_logs')
          .selectAll()
          .where('execution_id', 'in', logged)
          .orderBy('execution_id')
          .orderBy('seq')
          .execute()
      : [];
    const byId = new Map<string, ArchiveRecord>();
    for (const e of executions) byId.set(e.id, { v: 1, execution: e, events: [], logs: [] });
    for (const ev of events) byId.get(ev.execution_id)?.events.push(ev);
    for (const l of logs) byId.get(l.execution_id)?.logs.push(l);
    // Keep the caller's order (oldest first).
    for (const id of chunk) {
      const r = byId.get(id);
      if (r) out.push(r);
    }
  }
  return out;
}

/** Serialise records to JSON lines, yielding to the event loop every few hundred KiB. */
export async function toLines(records: readonly ArchiveRecord[]): Promise<Buffer> {
  const parts: string[] = [];
  let since = 0;
  for (const r of records) {
    const line = JSON.stringify(r) + '\n';
    parts.push(line);
    since += line.length;
    if (since > 512 * 1024) {
      since = 0;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
  return Buffer.from(parts.join(''), 'utf8');
}

const EXTRA_LEN = 12; // XLEN field value: SI1 SI2 LEN(2) + 8 bytes of member length
const HEADER_LEN = 10 + 2 + EXTRA_LEN;

/**
 * One gzip member holding `lines`, with its total length in the header's extra field. Compression
 * runs on libuv's thread pool (zlib.gzip), not on the event loop.
 */
export async function gzipMember(lines: Buffer): Promise<Buffer> {
  const gz = await gzipAsync(lines);
  // Node writes a 10-byte header with no flags; add FEXTRA and the `BL` subfield after it.
  const member = Buffer.alloc(gz.length + 2 + EXTRA_LEN);
  gz.copy(member, 0, 0, 10);
  member[3] = member[3]! | 0x04; // FLG.FEXTRA
  member.writeUInt16LE(EXTRA_LEN, 10);
  member.write('BL', 12, 'latin1');
  member.writeUInt16LE(8, 14);
  member.writeBigUInt64LE(BigInt(member.length), 16);
  gz.copy(member, HEADER_LEN, 10);
  return member;
}

/**
 * Where the valid members of `file` end: walk the `BL` lengths from the start. A member cut short
 * (or a header that does not parse) ends the walk; the caller truncates there. A file this writer
 * did not make (no `BL` field) is left alone (returns its size).
 */
export async function validLength(file: string): Promise<number> {
  const size = (await stat(file)).size;
  const fh = await open(file, 'r');
  try {
    const head = Buffer.alloc(HEADER_LEN);
    let at = 0;
    while (at < size) {
      const { bytesRead } = await fh.read(head, 0, HEADER_LEN, at);
      if (bytesRead < HEADER_LEN || head[0] !== 0x1f || head[1] !== 0x8b) return at;
      if (!(head[3]! & 0x04) || head.toString('latin1', 12, 14) !== 'BL') return at === 0 ? size : at;
      const len = Number(head.readBigUInt64LE(16));
      if (len < HEADER_LEN + 8 || at + len > size) return at;
      at += len;
    }
    return at;
  } finally {
    await fh.close();
  }
}

/** `executions-2026-11-30.jsonl.gz`: the archive file for the UTC day of `at`. */
export function archiveFileName(at: number): string {
  return `executions-${new Date(at).toISOString().slice(0, 10)}.jsonl.gz`;
}

/** Append gzip members to files, durably: the member is on disk (fsync) when `append` resolves. */
export class ArchiveWriter {
  private readonly checked = new Set<string>();

  /** Makes `dir` (mode 0700) when it is missing; a path that is something else is refused at once. */
  constructor(readonly dir: string) {
    ensureArchiveDir(dir);
  }

  /** Append `records` as one member to the day's file (by `at`, UTC). Resolves once fsynced. */
  async append(records: readonly ArchiveRecord[], at: number): Promise<{ file: string; bytes: number }> {
    const file = join(this.dir, archiveFileName(at));
    if (!this.checked.has(file)) ensureArchiveDir(this.dir); // made again if someone removed it
    return { file, bytes: await appendMember(file, await gzipMember(await toLines(records)), this.checked) };
  }
}

/**
 * The archive directory, made private (0700) when missing. Archives hold payloads, results and
 * log lines, so they are kept like the store itself: files 0600 in a 0700 directory.
 */
function ensureArchiveDir(dir: string): void {
  if (!existsSync(refuseNonDirectory(dir))) mkdirSync(dir, { recursive: true, mode: 0o700 });
}

/**
 * Write one member at the end of `file` (made 0600 when new) and fsync it (and the directory,
 * when the file is new). The directory must exist.
 */
export async function appendMember(file: string, member: Buffer, checked: Set<string>): Promise<number> {
  if (!checked.has(file)) {
    const existed = await stat(file).then(
      () => true,
      () => false,
    );
    if (existed) {
      const valid = await validLength(file);
      if (valid < (await stat(file)).size) await truncate(file, valid);
    }
    checked.add(file);
    const fh = await open(file, 'a', 0o600);
    await fh.sync();
    await fh.close();
    if (!existed) fsyncDir(join(file, '..'));
  }
  const fh = await open(file, 'a');
  try {
    await fh.write(member);
    await fh.sync();
  } finally {
    await fh.close();
  }
  return member.length;
}

function fsyncDir(dir: string): void {
  try {
    const fd = openSync(dir, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    // Some file systems refuse to open a directory for fsync; the file's own fsync still holds.
  }
}

/** Every record in an archive file (all members). For tests and small restores; use zcat | jq for big files. */
export async function readArchive(file: string): Promise<ArchiveRecord[]> {
  const fh = await open(file, 'r');
  try {
    const text = (await gunzipAsync(await fh.readFile())).toString('utf8');
    return text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as ArchiveRecord);
  } finally {
    await fh.close();
  }
}
