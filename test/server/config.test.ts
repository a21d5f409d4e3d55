/**
 * Configuration (src/config.ts): every BATON_* variable's default, a good value and a bad one,
 * whose message names the variable; the docs list exactly these variables; nothing else in src/
 * reads the environment; and a bad value stops a real `baton up` before it opens the store.
 * No store is used: the file runs the same in both projects.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, readConfig, readConnectionEnv, readEnv, readTelemetryEnv, type Config } from '../../src/config.ts';
import { openSqlite } from '../../src/store/sqlite.ts';
import { lockSqliteStore } from '../../src/store/sqlite-lock.ts';
import { BATON_BIN, freePort, spawnChild, startBatonUp } from '../helpers/process.ts';
import { openTestStore, STORE_KIND } from '../helpers/store.ts';

const ROOT = resolve(import.meta.dirname, '../..');

interface Variable {
  name: string;
  /** Where the variable lands in the parsed configuration. */
  at: (c: Config) => unknown;
  default: unknown;
  /** A value it accepts, and what it becomes. */
  good: [string, unknown];
  /** A value it refuses (none: any text is accepted). */
  bad?: string;
  /** The bad value is a credential: the message must not repeat it. */
  secret?: string;
}

const VARIABLES: Variable[] = [
  { name: 'BATON_DATA_DIR', at: (c) => c.dataDir, default: resolve('.baton'), good: ['/srv/baton', '/srv/baton'] },
  {
    name: 'BATON_DATABASE_URL',
    at: (c) => c.databaseUrl,
    default: undefined,
    good: ['postgres://u@db:5432/baton', 'postgres://u@db:5432/baton'],
    bad: 'mysql://root:hunter2@db/baton',
    secret: 'hunter2',
  },
  { name: 'BATON_PG_SCHEMA', at: (c) => c.pgSchema, default: undefined, good: ['tenant_1', 'tenant_1'], bad: 'public; DROP TABLE x' },
  { name: 'BATON_PORT', at: (c) => c.port, default: 7070, good: ['0', 0], bad: '70000' },
  { name: 'BATON_HOST', at: (c) => c.host, default: '127.0.0.1', good: ['0.0.0.0', '0.0.0.0'], bad: 'bad host' },
  {
    name: 'BATON_URL',
    at: (c) => c.serverUrl,
    default: undefined,
    good: ['https://baton.internal:7070', 'https://baton.internal:7070'],
    bad: 'baton.internal:7070',
  },
  { name: 'BATON_API_KEY', at: (c) => c.apiKey, default: undefined, good: ['bt_abc', 'bt_abc'] },
  { name: 'BATON_LOG_LEVEL', at: (c) => c.logLevel, default: 'info', good: ['DEBUG', 'debug'], bad: 'verbose' },
  { name: 'BATON_LOG_FORMAT', at: (c) => c.logFormat, default: undefined, good: ['Pretty', 'pretty'], bad: 'text' },
  { name: 'BATON_SECRET_KEY', at: (c) => c.secretKey, default: undefined, good: ['ab'.repeat(32), 'ab'.repeat(32)], bad: '   ' },
  { name: 'BATON_IDEMPOTENCY_TTL_HOURS', at: (c) => c.idempotency.ttlMs, default: 24 * 3_600_000, good: ['0.5', 1_800_000], bad: '0' },
  { name: 'BATON_IDEMPOTENCY_WAIT_MS', at: (c) => c.idempotency.waitMs, default: 5_000, good: ['100', 100], bad: '-1' },
  { name: 'BATON_HOOK_RATE_PER_ADDRESS', at: (c) => c.hookRates.perAddress, default: 50, good: ['0.001', 0.001], bad: '0' },
  { name: 'BATON_HOOK_RATE_PER_WEBHOOK', at: (c) => c.hookRates.perWebhook, default: 50, good: ['1000000', 1_000_000], bad: 'lots' },
  { name: 'BATON_CANARY_INTERVAL_MS', at: (c) => c.canary.intervalMs, default: 60_000, good: ['0', 0], bad: '1e3' },
  {
    name: 'BATON_ALERT_WEBHOOK_URL',
    at: (c) => c.canary.alertWebhookUrl,
    default: undefined,
    good: ['https://alerts.example/in', 'https://alerts.example/in'],
    bad: 'ftp://alerts.example/t0ken',
    secret: 't0ken',
  },
  {
    name: 'BATON_ALERT_SLACK_URL',
    at: (c) => c.canary.alertSlackUrl,
    default: undefined,
    good: ['https://hooks.slack.com/services/T/B/x', 'https://hooks.slack.com/services/T/B/x'],
    bad: 'hooks.slack.com/services/T/B/s3cret',
    secret: 's3cret',
  },
  { name: 'BATON_CHAIN_DEPTH_LIMIT', at: (c) => c.chainDepthLimit, default: 10, good: ['3', 3], bad: '0' },
  { name: 'BATON_MAX_UNREAD_MIB', at: (c) => c.unread.maxUnreadBytes, default: 128 * 1024 * 1024, good: ['0.5', 512 * 1024], bad: '0' },
  {
    name: 'BATON_MAX_UNREAD_MIB_PER_CONNECTION',
    at: (c) => c.unread.maxUnreadBytesPerConnection,
    default: 32 * 1024 * 1024,
    good: ['64', 64 * 1024 * 1024],
    bad: 'lots',
  },
  { name: 'BATON_RETENTION_DAYS', at: (c) => c.retention.retentionDays, default: 30, good: ['0.5', 0.5], bad: 'forever' },
  { name: 'BATON_AUDIT_RETENTION_DAYS', at: (c) => c.retention.auditRetentionDays, default: 365, good: ['0', 0], bad: '40000' },
  { name: 'BATON_ARCHIVE_DIR', at: (c) => c.retention.archiveDir, default: undefined, good: ['/srv/archive', '/srv/archive'], bad: '  ' },
  {
    name: 'BATON_MAX_CONNECTIONS_PER_ADDRESS',
    at: (c) => c.network.maxConnectionsPerAddress,
    default: 256,
    good: ['1000', 1000],
    bad: '0',
  },
  {
    name: 'BATON_TRUSTED_PROXIES',
    at: (c) => c.network.trustedProxies,
    default: [],
    good: ['10.1.2.3', [{ address: '10.1.2.3', prefix: 32, family: 'ipv4' }]],
    bad: 'nginx.internal',
  },
  { name: 'BATON_TRACE_PASSES', at: (c) => c.telemetry.passes, default: 'errors', good: ['All', 'all'], bad: 'some' },
  { name: 'BATON_PRUNE_INTERVAL_MS', at: (c) => c.retention.pruneIntervalMs, default: 600_000, good: ['1000', 1000], bad: '999' },
];

const namesIn = (text: string) => new Set(text.match(/BATON_[A-Z_]*[A-Z]/g) ?? []);

describe('readConfig: each variable', () => {
  it.each(VARIABLES)('$name: its default, a good value, and a bad one refused naming it', (v) => {
    expect(v.at(readConfig({}))).toEqual(v.default);
    expect(v.at(readConfig({ [v.name]: '' }))).toEqual(v.default); // empty is unset
    expect(v.at(readConfig({ [v.name]: v.good[0] }))).toEqual(v.good[1]);
    if (v.bad === undefined) return;
    let err: unknown;
    try {
      readConfig({ [v.name]: v.bad });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const { message, variable } = err as ConfigError;
    expect(variable).toBe(v.name);
    expect(message).toMatch(new RegExp(`^${v.name} must be `));
    expect(message).not.toContain('\n');
    if (v.secret) expect(message).not.toContain(v.secret);
  });

  it('numbers are plain decimals in range: no sign, exponent, hex, fraction where whole, or beyond the limit', () => {
    for (const bad of ['-1', '+1', '1e3', '0x10', 'Infinity', '1.5', '65536'])
      expect(() => readConfig({ BATON_PORT: bad }), bad).toThrow(/^BATON_PORT must be a TCP port from 0 to 65535/);
    expect(readConfig({ BATON_PORT: ' 8080 ' }).port).toBe(8080);
    expect(() => readConfig({ BATON_CANARY_INTERVAL_MS: '2147483648' })).toThrow(
      /BATON_CANARY_INTERVAL_MS must be whole milliseconds from 0 to 2147483647/,
    );
  });

  it('the CLI reads only what it needs: a server-only variable does not stop `baton agents list`', () => {
    const serverOnly = { BATON_RETENTION_DAYS: 'forever', BATON_LOG_LEVEL: 'loud', BATON_CANARY_INTERVAL_MS: 'soon' };
    expect(readConnectionEnv(serverOnly)).toEqual({ serverUrl: undefined, apiKey: undefined });
    expect(readEnv(serverOnly).port).toBe(7070);
    expect(() => readConfig(serverOnly)).toThrow(ConfigError);
  });
});

describe('one list of variables', () => {
  it('src/config.ts reads exactly the variables tested here and listed in docs/operations.md', () => {
    const read = namesIn(readFileSync(join(ROOT, 'src/config.ts'), 'utf8'));
    const doc = readFileSync(join(ROOT, 'docs/operations.md'), 'utf8');
    const section = doc.slice(doc.indexOf('## Environment variables'), doc.indexOf('\n## ', doc.indexOf('## Environment variables') + 1));
    const documented = new Set([...section.matchAll(/^\| `(BATON_[A-Z_]+)` \|/gm)].map((m) => m[1]!));
    expect([...documented].sort()).toEqual([...read].sort());
    expect(VARIABLES.map((v) => v.name).sort()).toEqual([...read].sort());
  });

  it('nothing else in src/ reads process.env (a child process is handed the environment in worker/command.ts)', () => {
    const files = readdirSync(join(ROOT, 'src'), { recursive: true, encoding: 'utf8' }).filter((f) => /\.tsx?$/.test(f));
    const readers = files.filter((f) => readFileSync(join(ROOT, 'src', f), 'utf8').includes('process.env'));
    expect(readers.sort()).toEqual(['config.ts', join('worker', 'command.ts')]);
  });
});

describe('a bad value stops `baton up`', () => {
  const dirs: string[] = [];
  afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

  /** `baton up` with only these BATON_* variables, in a fresh data directory. */
  async function up(vars: Record<string, string>) {
    const dataDir = mkdtempSync(join(tmpdir(), 'baton-config-'));
    dirs.push(dataDir);
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('BATON_')));
    const proc = spawn(process.execPath, [BATON_BIN, 'up'], {
      cwd: ROOT,
      env: { ...base, BATON_DATA_DIR: dataDir, ...vars },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => (stdout += d));
    proc.stderr.on('data', (d) => (stderr += d));
    // Without the check it would serve until killed: give it long enough to fail the assertions.
    const kill = setTimeout(() => proc.kill('SIGKILL'), 20_000);
    const code = await new Promise<number | null>((done) => proc.once('exit', (c) => done(c)));
    clearTimeout(kill);
    return { code, stdout, stderr, dataDir };
  }

  it('exits non-zero with one line naming the variable, before the store opens or a port is bound', async () => {
    const port = await freePort();
    const [badPort, badCanary] = await Promise.all([
      up({ BATON_PORT: 'http' }),
      up({ BATON_PORT: String(port), BATON_CANARY_INTERVAL_MS: 'soon' }),
    ]);
    expect(badPort.code).toBe(1);
    expect(badPort.stderr).toBe("error: BATON_PORT must be a TCP port from 0 to 65535 (0: any free port); got 'http'\n");
    expect(badCanary.code).toBe(1);
    expect(badCanary.stderr).toMatch(
      /^error: BATON_CANARY_INTERVAL_MS must be whole milliseconds from 0 to \d+ \(0: no timer in this process\); got 'soon'\n$/,
    );
    for (const r of [badPort, badCanary]) {
      expect(r.stdout).not.toMatch(/baton is up/);
      // The store was never opened and no admin key made: the check ran before anything else.
      expect(existsSync(join(r.dataDir, 'baton.sqlite'))).toBe(false);
      expect(existsSync(join(r.dataDir, 'admin.key'))).toBe(false);
    }
    // And the port it was given is still free.
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
  });

  it(`a port already taken: exits 1 naming BATON_HOST and BATON_PORT, its store closed (${STORE_KIND})`, async () => {
    const ts = await openTestStore();
    const taken = createServer();
    await new Promise<void>((done) => taken.listen(0, '127.0.0.1', done));
    try {
      const port = (taken.address() as AddressInfo).port;
      // Killed after 20 s if it hangs (a store left open kept it alive on PostgreSQL): then code is null.
      const r = await up({ ...ts.env, BATON_PORT: String(port) });
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr).toContain(`error: cannot listen on 127.0.0.1:${port} (BATON_HOST, BATON_PORT): the address is in use\n`);
      expect(r.stdout).not.toMatch(/baton is up/);
    } finally {
      taken.close();
      await ts.cleanup();
    }
  });
});

describe('one server per SQLite store', () => {
  it(`a second baton up on a SQLite store exits 1 saying so, and starts once the first is killed; PostgreSQL takes several (${STORE_KIND})`, async () => {
    const ts = await openTestStore();
    const env = { ...ts.env, BATON_CANARY_INTERVAL_MS: '0' };
    const first = await startBatonUp(env, await freePort());
    const later: Array<{ proc: ChildProcess }> = [first];
    try {
      if (STORE_KIND === 'sqlite') {
        const second = spawnChild([BATON_BIN, 'up'], { ...env, BATON_PORT: String(await freePort()) });
        later.push(second);
        const killer = setTimeout(() => second.proc.kill('SIGKILL'), 20_000);
        const code = await second.exited;
        clearTimeout(killer);
        expect(code, second.output()).toBe(1);
        expect(second.output()).toContain(
          `error: another baton up is serving this SQLite store (${join(ts.location.dataDir, 'baton.sqlite')})`,
        );
        expect(second.output()).not.toMatch(/baton is up/);
        // The first is untouched.
        expect((await fetch(`${first.url}/readyz`)).status).toBe(200);
        // Killed, it holds nothing: the operating system dropped its lock.
        first.proc.kill('SIGKILL');
        await first.exited;
      }
      const next = await startBatonUp(env, await freePort());
      later.push(next);
      expect((await fetch(`${next.url}/readyz`)).status).toBe(200);
    } finally {
      for (const c of later) c.proc.kill('SIGKILL');
      await ts.cleanup();
    }
  });

  it('an open that fails after taking the lock gives it back', () => {
    const dir = mkdtempSync(join(tmpdir(), 'baton-test-lock-'));
    try {
      const file = join(dir, 'baton.sqlite');
      writeFileSync(file, 'not a database. '.repeat(512));
      expect(() => openSqlite(file, { serve: true })).toThrow(/not a database/);
      // Held still, this would throw "another baton up is serving this SQLite store".
      lockSqliteStore(file).release();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('OpenTelemetry: what decides whether tracing is on (the exporter reads the other OTEL_* variables itself)', () => {
  it('off unless an OTLP endpoint is set; the traces endpoint wins; OTEL_SDK_DISABLED turns it off', () => {
    expect(readTelemetryEnv({})).toEqual({ enabled: false, passes: 'errors' });
    expect(readConfig({}).telemetry).toEqual({ enabled: false, passes: 'errors' });
    expect(readTelemetryEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
      enabled: true,
      endpoint: 'http://collector:4318/v1/traces',
      passes: 'errors',
    });
    expect(
      readTelemetryEnv({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://t.example/in',
      }),
    ).toEqual({ enabled: true, endpoint: 'https://t.example/in', passes: 'errors' });
    expect(readTelemetryEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'TRUE' })).toEqual({
      enabled: false,
      passes: 'errors',
    });
  });

  it('a bad value stops the start naming the variable, without echoing a URL that may hold a credential', () => {
    for (const name of ['OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']) {
      expect(() => readConfig({ [name]: 'collector:4318/s3cret' })).toThrow(new RegExp(`^${name} must be an http:// or https:// URL$`));
    }
    expect(() => readConfig({ OTEL_SDK_DISABLED: 'yes' })).toThrow(/^OTEL_SDK_DISABLED must be one of true, false; got 'yes'$/);
  });
});
