/**
 * `baton doctor` and `baton events` as real child processes against a server in this process.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../../src/cli/exit.ts';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { openSqlite } from '../../src/store/sqlite.ts';
import { BATON_BIN, freePort } from '../helpers/process.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
let ts: TestStore;
let node: BatonNode;
let admin: string;
const children = new Set<ReturnType<typeof spawn>>();

function baton(args: string[], env: Record<string, string> = {}, opts: { until?: (out: string) => boolean } = {}) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('BATON_')));
  const proc = spawn(process.execPath, [BATON_BIN, ...args], {
    cwd: ROOT,
    env: { ...base, BATON_URL: node.url, BATON_API_KEY: admin, ...ts.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(proc);
  let stdout = '';
  let stderr = '';
  proc.stdout!.setEncoding('utf8').on('data', (c: string) => {
    stdout += c;
    if (opts.until?.(stdout)) proc.kill('SIGINT');
  });
  const onErr = new Set<() => void>();
  proc.stderr!.setEncoding('utf8').on('data', (c: string) => {
    stderr += c;
    for (const f of onErr) f();
  });
  return {
    proc,
    /** Resolves when stderr contains `text`. */
    stderrHas: (text: string) =>
      new Promise<void>((resolve) => {
        const check = () => stderr.includes(text) && (onErr.delete(check), resolve());
        onErr.add(check);
        check();
      }),
    done: new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const timer = setTimeout(() => {
        proc.kill('SIGKILL');
        reject(new Error(`baton ${args.join(' ')} did not exit in 30 s:\n${stdout}\n${stderr}`));
      }, 30_000);
      proc.once('close', (code) => {
        clearTimeout(timer);
        children.delete(proc);
        resolve({ code, stdout, stderr });
      });
    }),
  };
}

beforeAll(async () => {
  ts = await openTestStore({ poolMax: 3 });
  node = await startNode({
    env: ts.nodeEnv,
    logger: false,
    reaper: false,
    nodeId: 'doctor-test',
    // Not the defaults a shell without BATON_RETENTION_DAYS has: the doctor must show the server's.
    retention: { retentionDays: 7, auditRetentionDays: 90 },
  });
  admin = node.createdAdminKey!;
});
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  await node?.stop();
  await ts?.cleanup();
});

type Checks = { ok: boolean; checks: Array<{ check: string; status: string; detail: string }> };
const statusOf = (r: Checks, check: string) => r.checks.find((c) => c.check === check)?.status;

describe('baton doctor', () => {
  it('passes on a healthy deployment, as a table and as JSON', async () => {
    const human = await baton(['doctor']).done;
    expect(human.code, human.stderr).toBe(EXIT.ok);
    expect(human.stdout).toMatch(/^CHECK\s+STATUS\s+DETAIL/);
    const r = await baton(['doctor', '--json']).done;
    expect(r.code, r.stderr).toBe(EXIT.ok);
    const out = JSON.parse(r.stdout) as Checks;
    expect(out.ok).toBe(true);
    for (const c of ['store', 'migrations', 'server', 'api key', 'history', 'retention']) expect(statusOf(out, c), c).toBe('ok');
    expect(out.checks.map((c) => c.check)).toContain('canary');
    // Retention as the server runs it, not as this shell's environment would have it (30 d, 365 d).
    const retention = out.checks.filter((c) => c.check === 'retention');
    expect(retention).toHaveLength(1);
    expect(retention[0]!.detail).toMatch(/^executions 7 d, audit 90 d, no archive \(the server's settings\); never pruned/);
  });

  it('warns when the data directory or its files are readable by others', async () => {
    const { chmodSync } = await import('node:fs');
    const healthy = JSON.parse((await baton(['doctor', '--json']).done).stdout) as Checks;
    expect(statusOf(healthy, 'file modes')).toBe('ok');
    chmodSync(ts.location.dataDir, 0o755);
    try {
      const r = JSON.parse((await baton(['doctor', '--json']).done).stdout) as Checks;
      expect(statusOf(r, 'file modes')).toBe('warn');
      expect(r.checks.find((c) => c.check === 'file modes')!.detail).toContain('755');
    } finally {
      chmodSync(ts.location.dataDir, 0o700);
    }
  });

  it('names a configured PostgreSQL schema that does not exist, without creating it (SQLite has none to miss)', async () => {
    expect(await ts.store.missingSetup()).toBeUndefined();
    if (STORE_KIND === 'sqlite') return;
    const schema = `cmt_missing_${process.pid}_${Date.now()}`;
    const r = await baton(['doctor', '--json'], { BATON_PG_SCHEMA: schema }).done;
    expect(r.code).toBe(EXIT.error);
    const checks = (JSON.parse(r.stdout) as Checks).checks;
    expect(checks.slice(0, 2)).toEqual([
      { check: 'store', status: 'ok', detail: 'PostgreSQL answers' },
      { check: 'migrations', status: 'fail', detail: `schema ${schema} does not exist (run \`baton migrate\`)` },
    ]);
    const { sql } = await import('kysely');
    const found = await sql<{ n: number }>`SELECT count(*) AS n FROM information_schema.schemata WHERE schema_name = ${schema}`.execute(
      ts.store.db,
    );
    expect(Number(found.rows[0]!.n)).toBe(0);
  });

  it("reports PostgreSQL's autovacuum for Baton's tables (none on SQLite)", async () => {
    const doctor = async () => JSON.parse((await baton(['doctor', '--json']).done).stdout) as Checks;
    const row = (r: Checks) => r.checks.find((c) => c.check === 'autovacuum');
    if (STORE_KIND === 'sqlite') {
      expect(row(await doctor())).toBeUndefined();
      return;
    }
    const { sql } = await import('kysely');
    const server = (await sql<{ autovacuum: string }>`SHOW autovacuum`.execute(ts.store.db)).rows[0]!.autovacuum;
    const before = row(await doctor())!;
    // (This machine's PostgreSQL may run with autovacuum off: then the doctor warns, and says why.)
    if (server === 'on') expect(before).toMatchObject({ status: 'ok' });
    else expect(before).toMatchObject({ status: 'warn', detail: expect.stringMatching(/^autovacuum = off/) });
    await sql`ALTER TABLE execution_logs SET (autovacuum_enabled = off)`.execute(ts.store.db);
    try {
      const after = row(await doctor())!;
      expect(after.status).toBe('warn');
      expect(after.detail).toContain('autovacuum_enabled = false on execution_logs');
      expect(after.detail).toContain('docs/operations.md');
    } finally {
      await sql`ALTER TABLE execution_logs RESET (autovacuum_enabled)`.execute(ts.store.db);
    }
  });

  it('fails on a refused key', async () => {
    const r = await baton(['doctor', '--json'], { BATON_API_KEY: 'bt_0000000000000000_' + 'x'.repeat(43) }).done;
    expect(r.code).toBe(EXIT.error);
    expect(statusOf(JSON.parse(r.stdout), 'api key')).toBe('fail');
  });

  it('fails when the server cannot be reached', async () => {
    const r = await baton(['doctor', '--json'], { BATON_URL: `http://127.0.0.1:${await freePort()}` }).done;
    expect(r.code).toBe(EXIT.error);
    const out = JSON.parse(r.stdout) as Checks;
    expect(statusOf(out, 'server')).toBe('fail');
    expect(r.stderr).toMatch(/problem/);
    // The store was read directly: its settings are this shell's, and the row says so.
    expect(out.checks.find((c) => c.check === 'retention')!.detail).toMatch(
      /^executions 30 d, audit 365 d, no archive \(this shell's settings/,
    );
  });

  it('fails when the store is not migrated', async () => {
    const env: Record<string, string> = {};
    let dir: string | undefined;
    if (STORE_KIND === 'sqlite') {
      dir = mkdtempSync(join(tmpdir(), 'baton-doctor-'));
      await openSqlite(join(dir, 'baton.sqlite')).close(); // exists, never migrated
      env.BATON_DATA_DIR = dir;
    } else env.BATON_PG_SCHEMA = `doctor_unmigrated_${Date.now().toString(36)}`;
    const r = await baton(['doctor', '--json'], env).done;
    if (dir) rmSync(dir, { recursive: true, force: true });
    expect(r.code).toBe(EXIT.error);
    const out = JSON.parse(r.stdout) as Checks;
    expect([statusOf(out, 'migrations'), statusOf(out, 'store')]).toContain('fail');
  });
});

describe('baton events', () => {
  it('prints status changes as they happen', async () => {
    await node.engine.agents.create({ name: 'doc-ev' }, 'test');
    let id = '';
    const child = baton(
      ['events', '--agent', 'doc-ev', '--json'],
      {},
      { until: (out) => !!id && out.includes(`"${id}"`) && out.includes('cancelled') },
    );
    await child.stderrHas('following'); // the stream is open
    id = (await node.engine.submit('doc-ev', { message: 'x' }, 'test')).id;
    await node.engine.cancel(id, 'test');
    const r = await child.done;
    const lines = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.filter((l) => l.id === id).map((l) => l.status)).toEqual(['queued', 'cancelled']);
  });
});
