/**
 * `baton up`'s log formats (docs/operations.md, "Logs"): readable lines and a banner with
 * BATON_LOG_FORMAT=pretty, JSON lines with json, and JSON when unset and stdout is a pipe; the
 * redacted paths stay redacted in both formats. Real `baton up` processes on this project's store.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { LogFormat } from '../../src/config.ts';
import { describeStore } from '../../src/server/banner.ts';
import { createLogger, resolveLogFormat } from '../../src/server/logger.ts';
import { BATON_BIN, freePort } from '../helpers/process.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

const stores: TestStore[] = [];
const running = new Set<ChildProcess>();
afterEach(async () => {
  for (const proc of running) proc.kill('SIGKILL');
  running.clear();
  await Promise.all(stores.splice(0).map((s) => s.cleanup()));
});

interface Up {
  stdout: () => string;
  stderr: () => string;
  /** SIGTERM, then the exit code once the process is gone. */
  stop: () => Promise<number | null>;
}

/**
 * `baton up` on the test store with only these BATON_* variables, its stdout a pipe, returned
 * once stdout shows `ready` (its signal handlers are installed before it prints anything).
 */
async function up(ts: TestStore, format: LogFormat | undefined, ready: string): Promise<Up> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('BATON_')));
  const env = { ...base, ...ts.env, BATON_PORT: String(await freePort()), ...(format ? { BATON_LOG_FORMAT: format } : {}) };
  const proc = spawn(process.execPath, [BATON_BIN, 'up'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(proc);
  let stdout = '';
  let stderr = '';
  proc.stdout!.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  proc.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const exited = new Promise<number | null>((done) => proc.once('exit', (code) => done(code)));
  const until = Date.now() + 30_000;
  while (!stdout.includes(ready)) {
    if (proc.exitCode !== null || Date.now() > until)
      throw new Error(`baton up did not print ${JSON.stringify(ready)}\nstdout:\n${stdout}\nstderr:\n${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    stdout: () => stdout,
    stderr: () => stderr,
    async stop() {
      proc.kill('SIGTERM');
      const code = await exited;
      running.delete(proc);
      return code;
    },
  };
}

const lines = (text: string) => text.split('\n').filter((l) => l.trim() !== '');

const parses = (line: string) => {
  try {
    JSON.parse(line);
    return true;
  } catch {
    return false;
  }
};

async function freshStore(): Promise<TestStore> {
  const ts = await openTestStore();
  stores.push(ts);
  return ts;
}

describe(`baton up's log format (${STORE_KIND})`, () => {
  it('pretty: readable lines and a banner without secrets; the admin key "printed above" only on the start that made it', async () => {
    const ts = await freshStore();
    const first = await up(ts, 'pretty', '  Docs:');
    expect(await first.stop()).toBe(0);
    const out = first.stdout();
    expect(lines(out).filter(parses)).toEqual([]);
    expect(out).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: baton is up /m);
    const url = /^ {2}URL: +(http:\/\/127\.0\.0\.1:\d+)$/m.exec(out)?.[1];
    expect(url, out).toBeDefined();
    expect(out).toContain(`  Dashboard:  ${url}/`);
    expect(out).toContain(`  Data dir:   ${ts.location.dataDir}\n`);
    expect(out).toContain(`  Admin key:  printed above, once (also in ${join(ts.location.dataDir, 'admin.key')})`);
    if (STORE_KIND === 'sqlite') expect(out).toContain(`  Store:      SQLite ${join(ts.location.dataDir, 'baton.sqlite')}\n`);
    else expect(out).toMatch(new RegExp(`^ {2}Store: +PostgreSQL postgres://.*, schema ${ts.location.schema}$`, 'm'));
    // The key itself went to stderr, once, and nowhere near the logs.
    const key = /^\s+(bt_\S+)$/m.exec(first.stderr())?.[1];
    expect(key, first.stderr()).toBeDefined();
    expect(out).not.toContain(key!);

    const second = await up(ts, 'pretty', '  Docs:');
    expect(await second.stop()).toBe(0);
    expect(second.stdout()).toContain(`  Admin key:  ${join(ts.location.dataDir, 'admin.key')}\n`);
    expect(second.stderr()).not.toContain('bt_');
  });

  it('json: every line of stdout is a JSON object, no banner, and "baton is up" carries url, store, node, data_dir; "baton stopped" last', async () => {
    const ts = await freshStore();
    const node = await up(ts, 'json', '"msg":"baton is up"');
    expect(await node.stop()).toBe(0);
    const out = lines(node.stdout());
    expect(out.length).toBeGreaterThan(1);
    for (const line of out) expect(parses(line), line).toBe(true);
    const isUp = out.map((l) => JSON.parse(l)).find((l) => l.msg === 'baton is up');
    expect(isUp).toMatchObject({ store: STORE_KIND, data_dir: ts.location.dataDir, url: expect.stringMatching(/^http:\/\//) });
    expect(JSON.parse(out.at(-1)!)).toMatchObject({ msg: 'baton stopped' });
    expect(node.stdout()).not.toContain('Admin key:');
  });

  it("a first start never overwrites another store's admin.key in the same data dir: it keeps it beside the new one", async () => {
    const ts = await freshStore();
    // What a first start on the other store left in this directory (SQLite, then PostgreSQL, both in ./.baton).
    const other = `bt_${'0'.repeat(15)}9_${'A'.repeat(43)}`;
    mkdirSync(ts.location.dataDir, { recursive: true });
    writeFileSync(join(ts.location.dataDir, 'admin.key'), other + '\n', { mode: 0o600 });
    const node = await up(ts, 'json', '"msg":"baton is up"');
    expect(await node.stop()).toBe(0);
    const key = /^\s+(bt_\S+)$/m.exec(node.stderr())?.[1];
    expect(key, node.stderr()).toBeDefined();
    expect(readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim()).toBe(key);
    const kept = readdirSync(ts.location.dataDir).filter((f) => f.startsWith('admin.key.replaced-'));
    expect(kept).toHaveLength(1);
    const keptPath = join(ts.location.dataDir, kept[0]!);
    expect(readFileSync(keptPath, 'utf8').trim()).toBe(other);
    expect(statSync(keptPath).mode & 0o777).toBe(0o600);
    expect(node.stderr()).toContain(`kept as ${keptPath}`);
    // Neither key reaches the logs.
    expect(node.stdout()).not.toContain(other);
    expect(node.stdout()).not.toContain(key!);
  });

  it('unset with stdout a pipe: JSON lines', async () => {
    const ts = await freshStore();
    const node = await up(ts, undefined, '"msg":"baton is up"');
    expect(await node.stop()).toBe(0);
    for (const line of lines(node.stdout())) expect(parses(line), line).toBe(true);
  });
});

describe('the logger', () => {
  const secrets = { req: { headers: { authorization: 'Bearer bt_live_Aut4' } }, agent: { key: 'bt_live_K3y' }, push: { secret: 's3cr3t' } };

  it.each(['pretty', 'json'] as const)('%s: redacted paths never reach the output', async (format) => {
    const sink = new PassThrough();
    let out = '';
    sink.setEncoding('utf8').on('data', (c: string) => (out += c));
    const logger = createLogger({ level: 'info', format, destination: sink });
    logger.info({ ...secrets, agent: { ...secrets.agent, name: 'visible-name' } }, 'request with credentials');
    logger.flush();
    await new Promise((r) => setImmediate(r));
    expect(out).toContain('request with credentials');
    expect(out).toContain('visible-name');
    expect(out).toContain('[Redacted]');
    for (const secret of ['bt_live_Aut4', 'bt_live_K3y', 's3cr3t']) expect(out).not.toContain(secret);
    if (format === 'json') expect(parses(out.trim())).toBe(true);
    else expect(parses(out.trim())).toBe(false);
  });

  it('unset picks pretty only for a terminal; a configured format wins', () => {
    expect(resolveLogFormat(undefined, true)).toBe('pretty');
    expect(resolveLogFormat(undefined, false)).toBe('json');
    expect(resolveLogFormat('json', true)).toBe('json');
    expect(resolveLogFormat('pretty', false)).toBe('pretty');
  });

  it("the banner's store line shows no credentials", () => {
    const shown = describeStore({
      databaseUrl: 'postgres://baton:hunter2@db:5432/baton?sslpassword=t0p',
      dataDir: '/d',
      schema: 'tenant_1',
    });
    expect(shown).toMatch(/^PostgreSQL postgres:\/\/.*@db:5432\/baton.*, schema tenant_1$/);
    expect(shown).not.toMatch(/hunter2|t0p/);
    const several = describeStore({
      databaseUrl: 'postgres://baton:hunter2@db1:5432,db2:6432/baton?target_session_attrs=read-write',
      dataDir: '/d',
    });
    expect(several).toMatch(/^PostgreSQL postgres:\/\/.*@db1:5432\/baton \(or db2:6432: whichever takes writes\), schema/);
    expect(several).not.toMatch(/hunter2/);
    expect(describeStore({ databaseUrl: 'sqlite:/srv/b.sqlite', dataDir: '/d' })).toBe('SQLite /srv/b.sqlite');
    expect(describeStore({ dataDir: '/d' })).toBe('SQLite /d/baton.sqlite');
  });
});
