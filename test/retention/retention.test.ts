import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import { readRetentionEnv } from '../../src/config.ts';
import { Engine } from '../../src/engine/engine.ts';
import { LeaderLease } from '../../src/engine/leader.ts';
import { ArchiveWriter, readArchive, validLength, type ArchiveRecord } from '../../src/retention/archive.ts';
import { exportHistory } from '../../src/retention/export.ts';
import { DAY_MS, pruneAll, pruneOnce, type SweepReport } from '../../src/retention/prune.ts';
import { Pruner, PRUNE_MIN_PAUSE_MS, PRUNE_QUIET_MS, VACUUM_STEP_PAGES } from '../../src/retention/pruner.ts';
import { readHistoryStats } from '../../src/retention/stats.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { SWEEP_AUTOCHECKPOINT_PAGES } from '../../src/store/sqlite.ts';
import { manualClock } from '../helpers/clock.ts';
import { executionRow, seedHistory } from '../helpers/history.ts';
import { BATON_BIN, spawnChild } from '../helpers/process.ts';
import { killLeftoverChildren, spawnFixture } from '../helpers/processes.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const NOW = Date.UTC(2026, 5, 1);
const WINDOWS = { retentionDays: 30, auditRetentionDays: 365 };
let ts: TestStore;
let dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'baton-retention-'));
  dirs.push(d);
  return d;
};

beforeEach(async () => {
  ts = await openTestStore();
});
afterEach(async () => {
  await ts.cleanup();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs = [];
});
afterAll(async () => {
  expect(await killLeftoverChildren()).toEqual([]);
});

async function ids(table: 'executions'): Promise<Set<string>> {
  return new Set((await ts.store.db.selectFrom(table).select('id').execute()).map((r) => r.id));
}
async function countWhere(
  table: 'execution_events' | 'execution_logs' | 'execution_log_heads' | 'idempotency_keys',
  executionIds: string[],
): Promise<number> {
  if (executionIds.length === 0) return 0;
  let n = 0;
  for (let i = 0; i < executionIds.length; i += 500) {
    const r = await ts.store.db
      .selectFrom(table)
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('execution_id', 'in', executionIds.slice(i, i + 500))
      .executeTakeFirstOrThrow();
    n += Number(r.n);
  }
  return n;
}
async function orphans(): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT (SELECT count(*) FROM execution_events e WHERE NOT EXISTS (SELECT 1 FROM executions x WHERE x.id = e.execution_id))
         + (SELECT count(*) FROM execution_logs l WHERE NOT EXISTS (SELECT 1 FROM executions x WHERE x.id = l.execution_id))
         + (SELECT count(*) FROM execution_log_heads h WHERE NOT EXISTS (SELECT 1 FROM executions x WHERE x.id = h.execution_id))
         + (SELECT count(*) FROM idempotency_keys k WHERE k.execution_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM executions x WHERE x.id = k.execution_id)) AS n`.execute(
    ts.store.db,
  );
  return Number(r.rows[0]!.n);
}
function readArchiveDir(dir: string): ArchiveRecord[] {
  const out: ArchiveRecord[] = [];
  for (const f of readdirSync(dir).sort()) {
    const text = gunzipSync(readFileSync(join(dir, f))).toString('utf8');
    for (const line of text.split('\n')) if (line) out.push(JSON.parse(line));
  }
  return out;
}

/** 120 runs 60 days old — logs on every third, keys on every tenth, every fourth failed and retried (150 rows). */
const seedOld = () =>
  seedHistory(ts.store, { count: 120, from: NOW - 60 * DAY_MS, stepMs: 1000, logsEvery: 3, keysEvery: 10, chainsEvery: 4 });

describe(`retention (${STORE_KIND})`, () => {
  it('prunes terminal executions older than the window with their events, logs, heads and keys; keeps young and unfinished ones', async () => {
    // Every fourth run failed and was retried: chains straddle the delete statements (100 ids each).
    const old = await seedOld();
    expect(old).toHaveLength(150);
    const young = await seedHistory(ts.store, { count: 30, from: NOW - 2 * DAY_MS, stepMs: 1000 });
    await ts.store.db
      .insertInto('executions')
      .values([
        executionRow('ex_old_queued', { status: 'queued', completed_at: null, created_at: NOW - 90 * DAY_MS }),
        executionRow('ex_old_running', { status: 'running', completed_at: null, created_at: NOW - 90 * DAY_MS }),
      ])
      .execute();
    expect(await countWhere('execution_events', old)).toBe(450);
    const oldLogs = await countWhere('execution_logs', old);
    const oldKeys = await countWhere('idempotency_keys', old);
    expect(oldLogs).toBeGreaterThan(0);
    expect(oldKeys).toBeGreaterThan(0);

    const r = await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW, batchSize: 110 });
    expect(r.executions).toBe(150);
    expect(r.events).toBe(450);
    expect([r.logs, r.keys]).toEqual([oldLogs, oldKeys]);
    expect(r.batches).toBeGreaterThanOrEqual(3);
    const left = await ids('executions');
    for (const id of old) expect(left.has(id)).toBe(false);
    for (const id of young) expect(left.has(id)).toBe(true);
    expect(left.has('ex_old_queued') && left.has('ex_old_running')).toBe(true);
    for (const t of ['execution_events', 'execution_logs', 'execution_log_heads', 'idempotency_keys'] as const)
      expect(await countWhere(t, old)).toBe(0);
    expect(await countWhere('execution_events', young)).toBe(90);
    expect(await orphans()).toBe(0);

    const stats = await readHistoryStats(ts.store, WINDOWS);
    expect(stats.last_prune).toMatchObject({ executions: 150, total_executions: 150, error: null });
    expect(stats.oldest_completed_at).toBe(NOW - 2 * DAY_MS);
    expect(stats.retention).toEqual({ days: 30, audit_days: 365, archive_dir: null });
    expect(stats.bytes).toBeGreaterThan(0);
    // A second sweep finds nothing.
    expect((await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW })).executions).toBe(0);
  });

  it('a batch gives the store up to a caller waiting for it (SQLite), whole chains at a time; the sweep still removes exactly the old rows', async () => {
    const old = await seedOld();
    const young = await seedHistory(ts.store, { count: 30, from: NOW - 2 * DAY_MS, stepMs: 1000 });
    const roots = new Map(
      (await ts.store.db.selectFrom('executions').select(['id', 'retry_root']).where('retry_root', 'is not', null).execute()).map((r) => [
        r.id,
        r.retry_root!,
      ]),
    );
    expect(roots.size).toBeGreaterThan(10);
    // Once the batch holds the store, a write transaction comes to wait for it (as a submit would).
    let write: Promise<unknown> | undefined;
    let waiting: boolean | undefined;
    const store: StoreAdapter = {
      ...ts.store,
      pruneTransaction: (fn) =>
        ts.store.pruneTransaction(async (tx, contended, inOrder) => {
          if (!write) {
            expect(contended()).toBe(false);
            write = ts.store.transaction((t) => t.selectFrom('agents').select('name').execute());
            for (let i = 0; i < 50 && !contended(); i++) await new Promise((r) => setImmediate(r));
            waiting = contended();
          }
          return fn(tx, contended, inOrder);
        }),
    };
    // One selection holds every old execution: the rest of a batch that gives the store up must
    // still come before the sweep moves on to the audit log.
    const first = await pruneOnce({ store, settings: WINDOWS, now: NOW, batchSize: 200 });
    await write;
    const rest = await first.prefetched;
    if (STORE_KIND === 'sqlite') {
      // SQLite has one writer: the batch ends after its first chunk of whole chains and commits it.
      expect(waiting).toBe(true);
      expect(first.executions).toBeGreaterThan(0);
      expect(first.executions).toBeLessThan(150);
      expect(rest?.ids).toHaveLength(150 - first.executions);
    } else {
      // PostgreSQL locks only the rows it deletes: the write ran beside the batch, which went whole.
      expect(waiting).toBe(false);
      expect(first.executions).toBe(150);
    }
    // No chain is split between what went and what stays.
    const left = await ids('executions');
    for (const [id, root] of roots) expect(left.has(id)).toBe(left.has(root));
    expect(await orphans()).toBe(0);

    // The same sweep goes on where the first batch stopped.
    let removed = first.executions;
    let b = first;
    while (b.next.phase === 'executions') {
      b = await pruneOnce({ store: ts.store, settings: WINDOWS, now: NOW, batchSize: 200, cursor: b.next, selected: b.prefetched });
      removed += b.executions;
    }
    expect(removed).toBe(150);
    expect([...(await ids('executions'))].sort()).toEqual([...young].sort());
    expect(await countWhere('execution_events', old)).toBe(0);
    expect(await orphans()).toBe(0);
  });

  it('keeps retry chains whose newest member is young or unfinished, and open violations’ subjects; removes whole old chains', async () => {
    const old = NOW - 60 * DAY_MS;
    await ts.store.db
      .insertInto('executions')
      .values([
        // Whole chain old: goes, both members in one statement (retry_of is a foreign key).
        executionRow('ex_c1_root', { status: 'failed', completed_at: old }),
        executionRow('ex_c1_retry', {
          status: 'succeeded',
          completed_at: old + 1000,
          retry_of: 'ex_c1_root',
          retry_root: 'ex_c1_root',
          retry_number: 1,
          trigger_kind: 'retry',
        }),
        // Newest member young: the chain stays.
        executionRow('ex_c2_root', { status: 'failed', completed_at: old }),
        executionRow('ex_c2_retry', {
          status: 'failed',
          completed_at: NOW - DAY_MS,
          retry_of: 'ex_c2_root',
          retry_root: 'ex_c2_root',
          retry_number: 1,
          trigger_kind: 'retry',
        }),
        // Newest member still queued: the chain stays.
        executionRow('ex_c3_root', { status: 'failed', completed_at: old }),
        executionRow('ex_c3_retry', {
          status: 'queued',
          completed_at: null,
          created_at: old,
          retry_of: 'ex_c3_root',
          retry_root: 'ex_c3_root',
          retry_number: 1,
          trigger_kind: 'retry',
        }),
        // An open violation's subject stays; a resolved one's goes.
        executionRow('ex_subject_open', { status: 'succeeded', completed_at: old }),
        executionRow('ex_subject_resolved', { status: 'succeeded', completed_at: old }),
      ])
      .execute();
    await ts.store.db
      .insertInto('canary_violations')
      .values([
        {
          invariant: 'G-04',
          subject: 'ex_subject_open',
          agent: 'seeded',
          tier: 'A',
          severity: 'critical',
          reason: 'secret_in_result',
          detail: null,
          first_seen: NOW - DAY_MS,
          last_seen: NOW,
          resolved_at: null,
        },
        {
          invariant: 'G-03',
          subject: 'ex_subject_resolved',
          agent: 'seeded',
          tier: 'A',
          severity: 'warning',
          reason: 'completed_before_started',
          detail: null,
          first_seen: NOW - 2 * DAY_MS,
          last_seen: NOW - DAY_MS,
          resolved_at: NOW - DAY_MS,
        },
      ])
      .execute();

    const r = await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW, batchSize: 2 });
    const left = await ids('executions');
    expect([...left].sort()).toEqual(['ex_c2_retry', 'ex_c2_root', 'ex_c3_retry', 'ex_c3_root', 'ex_subject_open']);
    expect(r.executions).toBe(3);
    expect(r.kept).toBeGreaterThanOrEqual(3);

    // Once the violation is resolved, its subject goes on the next sweep.
    await ts.store.db.updateTable('canary_violations').set({ resolved_at: NOW }).where('subject', '=', 'ex_subject_open').execute();
    await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW });
    expect((await ids('executions')).has('ex_subject_open')).toBe(false);
    expect(await orphans()).toBe(0);
  });

  it('archives every pruned execution with its events and logs, fsynced before its rows are deleted', async () => {
    const seeded = await seedHistory(ts.store, { count: 90, from: NOW - 40 * DAY_MS, stepMs: 1000, logsEvery: 2 });
    const dir = tmp();
    const seenBeforeDelete: string[] = [];
    class CheckingWriter extends ArchiveWriter {
      override async append(records: readonly ArchiveRecord[], at: number) {
        const out = await super.append(records, at);
        // The member is on disk and the rows are still in the database.
        const present = await ts.store.db
          .selectFrom('executions')
          .select('id')
          .where(
            'id',
            'in',
            records.map((r) => r.execution.id),
          )
          .execute();
        expect(present).toHaveLength(records.length);
        seenBeforeDelete.push(...records.map((r) => r.execution.id));
        return out;
      }
    }
    const r = await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW, batchSize: 20, archive: new CheckingWriter(dir) });
    expect(r.executions).toBe(90);
    expect(readdirSync(dir)).toEqual(['executions-2026-06-01.jsonl.gz']);
    const records = await readArchive(join(dir, 'executions-2026-06-01.jsonl.gz'));
    expect(records.map((x) => x.execution.id).sort()).toEqual([...seeded].sort());
    expect(seenBeforeDelete.sort()).toEqual([...seeded].sort());
    for (const rec of records) {
      expect(rec.v).toBe(1);
      expect(rec.events.map((e) => e.to_status)).toEqual(['succeeded', 'running', 'succeeded']);
      expect(JSON.parse(rec.execution.result!).summary).toMatch(/^report /);
    }
    const withLogs = records.filter((x) => x.logs.length > 0);
    expect(withLogs).toHaveLength(45);
    expect(withLogs[0]!.logs.map((l) => l.seq)).toEqual([1, 2, 3, 4, 5]);
    // Five members (one per batch), each self-describing: the file is valid to its end.
    expect(await validLength(join(dir, 'executions-2026-06-01.jsonl.gz'))).toBe(
      readFileSync(join(dir, 'executions-2026-06-01.jsonl.gz')).length,
    );
  });

  it('the archive is private: a missing directory is made 0700, its files 0600; a BATON_ARCHIVE_DIR that is a file stops `baton up`', async () => {
    await seedHistory(ts.store, { count: 5, from: NOW - 40 * DAY_MS });
    const dir = join(tmp(), 'archive', 'deep');
    await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW, archive: new ArchiveWriter(dir) });
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, 'executions-2026-06-01.jsonl.gz')).mode & 0o777).toBe(0o600);
    const file = join(tmp(), 'a-file');
    writeFileSync(file, '');
    expect(() => new ArchiveWriter(file)).toThrow(/BATON_ARCHIVE_DIR must be a directory/);
    const up = spawnChild([BATON_BIN, 'up'], { ...ts.env, BATON_DATA_DIR: tmp(), BATON_PORT: '0', BATON_ARCHIVE_DIR: file });
    expect(await up.exited).not.toBe(0);
    expect(up.output()).toMatch(/BATON_ARCHIVE_DIR must be a directory/);
  });

  it('deletes nothing when the archive cannot be written', async () => {
    await seedHistory(ts.store, { count: 10, from: NOW - 40 * DAY_MS });
    const dir = tmp();
    class FailingWriter extends ArchiveWriter {
      override async append(): Promise<{ file: string; bytes: number }> {
        throw new Error('disk full');
      }
    }
    await expect(pruneAll({ store: ts.store, settings: WINDOWS, now: NOW, archive: new FailingWriter(dir) })).rejects.toThrow('disk full');
    expect((await ids('executions')).size).toBe(10);
  });

  it('a half-written archive tail (a killed writer) is cut before the next member, so no line after it is lost', async () => {
    const seeded = await seedHistory(ts.store, { count: 30, from: NOW - 40 * DAY_MS });
    const dir = tmp();
    const file = join(dir, 'executions-2026-06-01.jsonl.gz');
    await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW, batchSize: 10, archive: new ArchiveWriter(dir) });
    // Simulate a writer killed mid-member: append half of a valid member.
    const whole = readFileSync(file);
    const { appendFileSync } = await import('node:fs');
    appendFileSync(file, whole.subarray(0, Math.floor(whole.length / 5)));
    expect(await validLength(file)).toBe(whole.length);
    const more = await seedHistory(ts.store, { count: 5, from: NOW - 40 * DAY_MS });
    await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW, archive: new ArchiveWriter(dir) });
    const records = await readArchive(file);
    expect(records.map((r) => r.execution.id).sort()).toEqual([...seeded, ...more].sort());
  });

  it('export writes the archive format for executions finished before a date, and deletes nothing', async () => {
    const oldIds = await seedHistory(ts.store, { count: 40, from: NOW - 50 * DAY_MS, stepMs: 1000 });
    await seedHistory(ts.store, { count: 10, from: NOW - DAY_MS });
    await ts.store.db
      .insertInto('executions')
      .values(executionRow('ex_running', { status: 'running', completed_at: null, created_at: NOW - 60 * DAY_MS }))
      .execute();
    const out = join(tmp(), 'export.jsonl.gz');
    const r = await exportHistory({ store: ts.store, before: NOW - 10 * DAY_MS, out, chunk: 15 });
    expect(r).toMatchObject({ executions: 40, events: 120 });
    const records = await readArchive(out);
    expect(records.map((x) => x.execution.id).sort()).toEqual([...oldIds].sort());
    expect(records[0]!.events).toHaveLength(3);
    expect((await ids('executions')).size).toBe(51);
    await expect(exportHistory({ store: ts.store, before: NOW, out })).rejects.toThrow(/exists/);
    // Into a directory that is not there: refused, nothing made.
    const nowhere = join(tmp(), 'no', 'such');
    await expect(exportHistory({ store: ts.store, before: NOW, out: join(nowhere, 'x.jsonl.gz') })).rejects.toThrow(/does not exist/);
    expect(existsSync(nowhere)).toBe(false);
    if (STORE_KIND === 'sqlite') {
      // `baton export` pointed at a data directory without a store: refused; no empty store is made there.
      const empty = tmp();
      const cli = spawnChild([BATON_BIN, 'export', '--before', '2026-01-01', '--out', join(empty, 'x.jsonl.gz')], {
        ...ts.env,
        BATON_DATA_DIR: empty,
      });
      expect(await cli.exited).not.toBe(0);
      expect(cli.output()).toMatch(/no SQLite store at/);
      expect(readdirSync(empty)).toEqual([]);
    }
  });

  it('prunes the audit log by its own window, oldest first, stopping at the first younger row', async () => {
    const at = (d: number) => NOW - d * DAY_MS;
    await ts.store.db
      .insertInto('audit_log')
      .values(
        [400, 390, 380, 100, 370, 10].map((d) => ({
          at: at(d),
          actor: 'test',
          action: 'agent.create',
          subject: 'a',
          execution_id: null,
          detail: null,
        })),
      )
      .execute();
    const r = await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW, batchSize: 2 });
    expect(r.audit).toBe(3);
    const left = await ts.store.db.selectFrom('audit_log').select('at').orderBy('id').execute();
    // The row 370 days old sits after a younger one: ids grow with time, so it waits for the next sweep.
    expect(left.map((x) => Math.round((NOW - Number(x.at)) / DAY_MS))).toEqual([100, 370, 10]);
    expect((await readHistoryStats(ts.store, WINDOWS)).last_prune).toMatchObject({ audit: 3, total_audit: 3 });
    // 0 keeps every audit row.
    expect(
      (await pruneAll({ store: ts.store, settings: { retentionDays: 30, auditRetentionDays: 0 }, now: NOW + 1000 * DAY_MS })).audit,
    ).toBe(0);
  });

  it('prunes resolved canary violations and delivered or failed alerts older than the window', async () => {
    const old = NOW - 40 * DAY_MS;
    await ts.store.db
      .insertInto('canary_violations')
      .values([
        {
          invariant: 'E-01',
          subject: 'x1',
          agent: null,
          tier: 'A',
          severity: 'critical',
          reason: 'lease_lapsed',
          detail: null,
          first_seen: old,
          last_seen: old,
          resolved_at: old,
        },
        {
          invariant: 'E-01',
          subject: 'x2',
          agent: null,
          tier: 'A',
          severity: 'critical',
          reason: 'lease_lapsed',
          detail: null,
          first_seen: old,
          last_seen: old,
          resolved_at: null,
        },
        {
          invariant: 'E-01',
          subject: 'x3',
          agent: null,
          tier: 'A',
          severity: 'critical',
          reason: 'lease_lapsed',
          detail: null,
          first_seen: NOW,
          last_seen: NOW,
          resolved_at: NOW,
        },
      ])
      .execute();
    const alert = (status: 'pending' | 'delivered' | 'failed', created_at: number) => ({
      invariant: 'E-01',
      transition: 'violated' as const,
      sink: 'webhook' as const,
      body: '{}',
      status,
      next_attempt_at: created_at,
      last_error: null,
      created_at,
      delivered_at: null,
    });
    await ts.store.db
      .insertInto('canary_alerts')
      .values([alert('delivered', old), alert('pending', old), alert('failed', old), alert('delivered', NOW)])
      .execute();
    const r = await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW });
    expect(r).toMatchObject({ violations: 1, alerts: 2 });
    expect(
      (await ts.store.db.selectFrom('canary_violations').select('subject').orderBy('subject').execute()).map((v) => v.subject),
    ).toEqual(['x2', 'x3']);
    expect(
      (await ts.store.db.selectFrom('canary_alerts').select(['status', 'created_at']).orderBy('id').execute()).map((a) => a.status),
    ).toEqual(['pending', 'delivered']);
  });

  it('history stays append-only for every writer but the pruner', async () => {
    await seedHistory(ts.store, { count: 2, from: NOW - 40 * DAY_MS });
    await ts.store.db
      .insertInto('audit_log')
      .values({ at: NOW, actor: 'test', action: 'x', subject: null, execution_id: null, detail: null })
      .execute();
    const refused = /append-only/;
    await expect(ts.store.db.updateTable('execution_events').set({ reason: 'rewritten' }).execute()).rejects.toThrow(refused);
    await expect(ts.store.db.deleteFrom('execution_events').execute()).rejects.toThrow(refused);
    await expect(ts.store.db.updateTable('audit_log').set({ action: 'rewritten' }).execute()).rejects.toThrow(refused);
    await expect(ts.store.db.deleteFrom('audit_log').execute()).rejects.toThrow(refused);
    await expect(ts.store.transaction((tx) => tx.deleteFrom('execution_events').execute())).rejects.toThrow(refused);
    await expect(ts.store.transaction((tx) => tx.deleteFrom('audit_log').execute())).rejects.toThrow(refused);
    // Even the pruner's transaction may not rewrite history, only delete it.
    await expect(ts.store.pruneTransaction((tx) => tx.updateTable('audit_log').set({ action: 'rewritten' }).execute())).rejects.toThrow(
      refused,
    );
    // After a pruner's transaction, ordinary writers are refused again.
    await ts.store.pruneTransaction(async () => undefined);
    await expect(ts.store.db.deleteFrom('execution_events').execute()).rejects.toThrow(refused);
    expect(
      Number(
        (
          await ts.store.db
            .selectFrom('execution_events')
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      ),
    ).toBe(6);
  });

  it('BATON_RETENTION_DAYS=0 keeps everything; bad values are refused naming the variable (and stop `baton up`)', async () => {
    expect(readRetentionEnv({})).toEqual({ retentionDays: 30, auditRetentionDays: 365, archiveDir: undefined, pruneIntervalMs: 600_000 });
    expect(
      readRetentionEnv({
        BATON_RETENTION_DAYS: '0',
        BATON_AUDIT_RETENTION_DAYS: '7',
        BATON_ARCHIVE_DIR: '/tmp/arch',
        BATON_PRUNE_INTERVAL_MS: '5000',
      }),
    ).toEqual({
      retentionDays: 0,
      auditRetentionDays: 7,
      archiveDir: '/tmp/arch',
      pruneIntervalMs: 5000,
    });
    for (const bad of ['-1', 'thirty', '1e3', '40000'])
      expect(() => readRetentionEnv({ BATON_RETENTION_DAYS: bad })).toThrow(/BATON_RETENTION_DAYS/);
    expect(() => readRetentionEnv({ BATON_AUDIT_RETENTION_DAYS: 'x' })).toThrow(/BATON_AUDIT_RETENTION_DAYS/);
    for (const bad of ['0', '999', '1.5', '2147483648'])
      expect(() => readRetentionEnv({ BATON_PRUNE_INTERVAL_MS: bad })).toThrow(/BATON_PRUNE_INTERVAL_MS/);

    await seedHistory(ts.store, { count: 20, from: NOW - 400 * DAY_MS });
    const r = await pruneAll({ store: ts.store, settings: { retentionDays: 0, auditRetentionDays: 0 }, now: NOW });
    expect(r.executions + r.audit).toBe(0);
    expect((await ids('executions')).size).toBe(20);
    expect(new Pruner({ store: ts.store, settings: { retentionDays: 0, auditRetentionDays: 0 }, nodeId: 'n' }).enabled).toBe(false);

    const up = spawnChild([BATON_BIN, 'up'], { ...ts.env, BATON_DATA_DIR: tmp(), BATON_PORT: '0', BATON_RETENTION_DAYS: 'forever' });
    expect(await up.exited).not.toBe(0);
    expect(up.output()).toMatch(/BATON_RETENTION_DAYS must be a number of days/);
  });

  it('GET /v1/history (admin only) and /metrics show the history size, oldest row, settings and last prune', async () => {
    await seedHistory(ts.store, { count: 30, from: NOW - 60 * DAY_MS });
    await seedHistory(ts.store, { count: 5, from: NOW - DAY_MS });
    await pruneAll({ store: ts.store, settings: WINDOWS, now: NOW });
    const engine = new Engine({ store: ts.store, nodeId: 'history-test' });
    const keys = new KeyStore(ts.store);
    const app = await buildServer({
      engine,
      keys,
      logger: false,
      retention: { retentionDays: 30, auditRetentionDays: 365, archiveDir: '/srv/archive' },
    });
    try {
      const admin = (await keys.create({ name: 'admin', scope: 'admin' }, 'test')).key;
      await engine.agents.create({ name: 'h-agent' }, 'test');
      const worker = (await keys.create({ name: 'w', scope: 'agent', agent: 'h-agent' }, 'test')).key;
      const r = await app.inject({ method: 'GET', url: '/v1/history', headers: { authorization: `Bearer ${admin}` } });
      expect(r.statusCode).toBe(200);
      const body = r.json();
      expect(body).toMatchObject({
        store: STORE_KIND,
        oldest_completed_at: new Date(NOW - DAY_MS).toISOString(),
        retention: { days: 30, audit_days: 365, archive_dir: '/srv/archive' },
        last_prune: { executions: 30, total_executions: 30, error: null },
      });
      expect(body.bytes).toBeGreaterThan(0);
      if (STORE_KIND === 'sqlite') expect(body.rows.executions).toBeGreaterThanOrEqual(5);
      expect((await app.inject({ method: 'GET', url: '/v1/history', headers: { authorization: `Bearer ${worker}` } })).statusCode).toBe(
        403,
      );
      const m = (await app.inject({ method: 'GET', url: '/metrics' })).body;
      expect(m).toMatch(/^baton_history_bytes \d+/m);
      expect(m).toMatch(/^baton_history_retention_days\{kind="executions"\} 30$/m);
      expect(m).toMatch(/^baton_history_last_prune_removed\{kind="executions"\} 30$/m);
      expect(m).toMatch(/^baton_history_last_prune_timestamp_seconds \d+/m);
      expect(m).toMatch(/^baton_history_oldest_age_seconds \d+/m);
    } finally {
      await app.close();
      engine.close();
    }
  });

  it('leader lease: one of two callers wins, renews, and the other takes over after it lapses', async () => {
    const clock = manualClock(NOW);
    const a = new LeaderLease(ts.store, 'pruner', 'node-a', 60_000, clock);
    const b = new LeaderLease(ts.store, 'pruner', 'node-b', 60_000, clock);
    const first = await Promise.all([a.acquire(), b.acquire()]);
    expect(first.filter(Boolean)).toHaveLength(1);
    const [leader, other] = first[0] ? [a, b] : [b, a];
    clock.advance(50_000);
    expect(await leader.acquire()).toBe(true); // renewed until +110 s
    clock.advance(50_000);
    expect(await other.acquire()).toBe(false);
    expect((await other.holder())?.owner).toBe(leader.owner);
    clock.advance(61_000); // the leader stopped renewing: lapsed
    expect(await other.acquire()).toBe(true);
    expect(await leader.acquire()).toBe(false);
    await other.release();
    expect(await leader.acquire()).toBe(true);
  });

  it('the pruner service paces its batches, records the sweep and (SQLite) returns freed pages', async () => {
    await seedHistory(ts.store, { count: 200, from: NOW - 60 * DAY_MS, resultBytes: 4096 });
    const clock = manualClock(NOW);
    const reports: number[] = [];
    const pruner = new Pruner({
      store: ts.store,
      settings: { ...WINDOWS, archiveDir: undefined },
      nodeId: 'node-a',
      clock,
      batchSize: 50,
      onSweep: (r) => reports.push(r.executions),
    });
    const other = new Pruner({ store: ts.store, settings: { ...WINDOWS, archiveDir: undefined }, nodeId: 'node-b', clock, batchSize: 50 });
    const first = await pruner.pass();
    expect(first.nextInMs).toBeGreaterThanOrEqual(PRUNE_MIN_PAUSE_MS); // paced: at least the minimum pause
    // On PostgreSQL the lease keeps a second process out while the first sweeps.
    if (STORE_KIND === 'postgres') expect(await other.pass()).toEqual({});
    let passes = 1;
    let freeBefore: number | null = null;
    for (let out = first; out.nextInMs !== undefined && passes < 100; passes++) {
      if (out.report && STORE_KIND === 'sqlite') freeBefore = (await readHistoryStats(ts.store, WINDOWS)).free_bytes;
      out = await pruner.pass();
    }
    expect(reports).toEqual([200]);
    expect((await ids('executions')).size).toBe(0);
    if (STORE_KIND === 'sqlite') {
      expect(freeBefore).toBeGreaterThan(0);
      expect((await readHistoryStats(ts.store, WINDOWS)).free_bytes).toBe(0);
    }
    await pruner.lease?.release();
    await other.lease?.release();
  });

  it('paces by demand: the minimum pause while nothing else happens, the long one after work announced during a batch, a wait for a quiet moment after work just announced', async () => {
    // Rows for many more batches than the passes below take: under load a few more of them can end
    // on the long pause, and a sweep that ended first would leave no batch to wait before.
    await seedHistory(ts.store, { count: 200, from: NOW - 60 * DAY_MS });
    // Another writer announces a state change while the batch holds the store (as a submit would).
    let busy = false;
    const store: StoreAdapter = {
      ...ts.store,
      pruneTransaction: async (fn) => {
        const out = await ts.store.pruneTransaction(fn);
        if (busy) ts.store.publish('execution', 'other');
        return out;
      },
    };
    const settings = { ...WINDOWS, archiveDir: undefined };
    // A huge factor: the long pause is unmistakable, and so is the quiet wait it bounds (the pause
    // less the batch's own read time: with a factor of 1,000 a busy machine made that 5 ms once).
    const pruner = new Pruner({ store, settings, nodeId: 'node-a', batchSize: 5, pauseFactor: 1_000_000, demandPacing: true });
    expect((await pruner.pass()).nextInMs).toBe(PRUNE_MIN_PAUSE_MS);
    busy = true;
    const paces: number[] = [];
    for (let i = 0; i < 2; i++) paces.push((await pruner.pass()).nextInMs!);
    expect(Math.max(...paces)).toBeGreaterThan(PRUNE_MIN_PAUSE_MS);
    busy = false;
    let out = await pruner.pass();
    while (out.nextInMs !== PRUNE_MIN_PAUSE_MS && !out.report) out = await pruner.pass();
    expect(out.report, 'the sweep is still under way').toBeUndefined();
    ts.store.publish('execution', 'other'); // just now: the next pass waits for a quiet moment first
    // Heard once delivered (a microtask on SQLite), as a submit's announcement is heard before a later pass.
    await new Promise<void>((r) => queueMicrotask(r));
    const t0 = performance.now();
    await pruner.pass();
    expect(performance.now() - t0).toBeGreaterThanOrEqual(PRUNE_QUIET_MS * 0.8);
    for (let i = 0; out.nextInMs !== undefined && i < 100; i++) out = await pruner.pass();
    expect((await ids('executions')).size).toBe(0);
    await pruner.lease?.release();
    // Without demand pacing, the long pause whatever happens.
    await seedHistory(ts.store, { count: 5, from: NOW - 60 * DAY_MS });
    const fixed = new Pruner({ store, settings, nodeId: 'node-a', batchSize: 5, pauseFactor: 1000, demandPacing: false });
    expect((await fixed.pass()).nextInMs).toBeGreaterThan(PRUNE_MIN_PAUSE_MS);
    for (let i = 0; (await fixed.pass()).nextInMs !== undefined && i < 10; i++);
    await fixed.lease?.release();
  });

  it('the pruner sets the WAL auto-checkpoint aside for a sweep and its vacuum steps, checkpoints between them, and restores it after the last step and after a failing sweep', async () => {
    /** SQLite: the writer connection's automatic checkpoint (pages); PostgreSQL has none. */
    const autoCheckpoint = async () =>
      STORE_KIND === 'sqlite'
        ? Number((await sql<{ wal_autocheckpoint: number }>`PRAGMA wal_autocheckpoint`.execute(ts.store.db)).rows[0]!.wal_autocheckpoint)
        : null;
    // Not the default: the sweep restores what it found.
    if (STORE_KIND === 'sqlite') await sql`PRAGMA wal_autocheckpoint = 777`.execute(ts.store.db);
    const found = await autoCheckpoint();
    const old = await seedOld();
    const young = await seedHistory(ts.store, { count: 30, from: NOW - 2 * DAY_MS, stepMs: 1000 });
    await ts.store.db
      .insertInto('executions')
      .values([executionRow('ex_old_running', { status: 'running', completed_at: null, created_at: NOW - 90 * DAY_MS })])
      .execute();
    const archive = join(tmp(), 'archive');
    const settings = { ...WINDOWS, archiveDir: archive };
    const clock = manualClock(NOW);

    // A sweep that fails midway: the archive directory turns into a file after the first batch.
    const failing = new Pruner({ store: ts.store, settings, nodeId: 'node-a', clock, batchSize: 30 });
    const first = await failing.pass();
    expect(first.nextInMs).toBeGreaterThanOrEqual(PRUNE_MIN_PAUSE_MS);
    if (STORE_KIND === 'sqlite') expect(await autoCheckpoint()).toBe(SWEEP_AUTOCHECKPOINT_PAGES);
    rmSync(archive, { recursive: true, force: true });
    writeFileSync(archive, 'not a directory');
    let error: unknown;
    for (let passes = 0; passes < 50 && error === undefined; passes++) await failing.pass().catch((err) => (error = err));
    expect(String(error)).toMatch(/EEXIST|ENOTDIR/);
    expect(await autoCheckpoint()).toBe(found);
    expect((await readHistoryStats(ts.store, WINDOWS)).last_prune?.error).toMatch(/EEXIST|ENOTDIR/);
    const afterFailure = await ids('executions');
    expect(afterFailure.size).toBeGreaterThan(young.length + 1); // stopped midway …
    expect(afterFailure.size).toBeLessThan(old.length + young.length + 1); // … after at least one batch
    expect(await orphans()).toBe(0);
    await failing.lease?.release();

    // A whole sweep: every old execution goes, nothing else; the setting is back at its end.
    rmSync(archive, { force: true });
    const reports: SweepReport[] = [];
    // checkpointFrames 1: a checkpoint after every batch that deleted (the default waits for ~4,000 WAL frames).
    const pruner = new Pruner({
      store: ts.store,
      settings,
      nodeId: 'node-a',
      clock,
      batchSize: 30,
      checkpointFrames: 1,
      onSweep: (r) => reports.push(r),
    });
    let out = await pruner.pass();
    for (let passes = 1; out.report === undefined && passes < 100; passes++) {
      if (STORE_KIND === 'sqlite') expect(await autoCheckpoint()).toBe(SWEEP_AUTOCHECKPOINT_PAGES);
      out = await pruner.pass();
    }
    expect(reports).toHaveLength(1);
    const r = reports[0]!;
    expect(r.executions).toBe(afterFailure.size - young.length - 1);
    // SQLite: one checkpoint step after every batch that deleted; PostgreSQL: none.
    if (STORE_KIND === 'sqlite') expect(r.checkpoints).toBeGreaterThanOrEqual(Math.ceil(r.executions / 30));
    else expect(r.checkpoints).toBe(0);
    // SQLite: the vacuum steps come next, still with the automatic checkpoint aside; PostgreSQL has none.
    if (STORE_KIND === 'sqlite') {
      expect(out.nextInMs).toBe(PRUNE_MIN_PAUSE_MS);
      expect(await autoCheckpoint()).toBe(SWEEP_AUTOCHECKPOINT_PAGES);
      for (let passes = 0; out.nextInMs !== undefined && passes < 100; passes++) out = await pruner.pass();
    }
    expect(out.nextInMs).toBeUndefined();
    expect(await autoCheckpoint()).toBe(found);
    expect([...(await ids('executions'))].sort()).toEqual([...young, 'ex_old_running'].sort());
    expect(await countWhere('execution_events', young)).toBe(90);
    for (const t of ['execution_events', 'execution_logs', 'execution_log_heads', 'idempotency_keys'] as const)
      expect(await countWhere(t, old)).toBe(0);
    expect(await orphans()).toBe(0);
    await pruner.lease?.release();
  });

  it('after a sweep, SQLite returns the freed pages to the file system in steps of VACUUM_STEP_PAGES, each run to its end on the pruner thread (PostgreSQL leaves it to autovacuum)', async () => {
    await seedHistory(ts.store, { count: 1500, from: NOW - 60 * DAY_MS, stepMs: 10, logsEvery: 1, resultBytes: 4096 });
    const pragma = async (name: 'freelist_count' | 'page_count') =>
      Number((await sql.raw<Record<string, number>>(`PRAGMA ${name}`).execute(ts.store.db)).rows[0]![name]);
    const pruner = new Pruner({ store: ts.store, settings: WINDOWS, nodeId: 'node-a', clock: manualClock(NOW), batchSize: 500 });
    let out = await pruner.pass();
    for (let passes = 0; out.report === undefined && passes < 100; passes++) out = await pruner.pass();
    expect(out.report?.executions).toBe(1500);
    if (STORE_KIND === 'postgres') {
      expect(out.nextInMs).toBeUndefined(); // no vacuum stage
      expect(await ts.store.reclaimSpace(VACUUM_STEP_PAGES)).toBe(0);
      return;
    }
    const freed = await pragma('freelist_count');
    expect(freed).toBeGreaterThan(VACUUM_STEP_PAGES); // enough for two steps at least
    const pages = await pragma('page_count');
    // One step: a whole step's pages, not the one page a statement stepped once would free.
    out = await pruner.pass();
    expect(await pragma('freelist_count')).toBe(freed - VACUUM_STEP_PAGES);
    expect(await pragma('page_count')).toBe(pages - VACUUM_STEP_PAGES);
    for (let passes = 0; out.nextInMs !== undefined && passes < 100; passes++) out = await pruner.pass();
    expect(await pragma('freelist_count')).toBe(0);
    expect(await pragma('page_count')).toBeLessThanOrEqual(pages - freed); // (pointer-map pages may go too)
    await pruner.lease?.release();
  });

  it('a pruner SIGKILLed mid-prune, again and again, leaves no orphaned events or logs and loses no archived execution', async () => {
    const seeded = await seedHistory(ts.store, {
      count: 1500,
      from: NOW - 60 * DAY_MS,
      stepMs: 10,
      logsEvery: 2,
      keysEvery: 5,
      chainsEvery: 25,
    });
    const young = await seedHistory(ts.store, { count: 20, from: Date.now() - DAY_MS });
    const archive = tmp();
    let kills = 0;
    for (let round = 0; round < 4; round++) {
      const child = spawnFixture('pruner', ['--archive', archive, '--batch', '30'], ts.env);
      // Let it get going, then kill it at a random moment inside its stream of batches.
      await child.line((l) => l.startsWith('batch ') || l.startsWith('done '), 30_000);
      await new Promise((r) => setTimeout(r, Math.random() * 60));
      if (child.alive()) {
        child.proc.kill('SIGKILL');
        kills++;
      }
      await child.exit(10_000);
      expect(await orphans()).toBe(0);
    }
    expect(kills).toBeGreaterThanOrEqual(2);
    expect((await ids('executions')).size).toBeGreaterThan(young.length); // the kills stopped it midway
    // A last run to the end (it also cuts a half-written archive tail left by a kill).
    const last = spawnFixture('pruner', ['--archive', archive, '--batch', '30'], ts.env);
    await last.line((l) => l.startsWith('done '), 60_000);
    await last.exit(10_000);

    expect(await orphans()).toBe(0);
    const left = await ids('executions');
    expect([...left].sort()).toEqual([...young].sort());
    const archived = new Set(readArchiveDir(archive).map((r) => r.execution.id));
    const gone = seeded.filter((id) => !left.has(id));
    expect(gone).toHaveLength(seeded.length);
    for (const id of gone) expect(archived.has(id)).toBe(true);
  }, 120_000);
});
