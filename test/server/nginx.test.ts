/**
 * `baton up` behind a real nginx (Debian's package), configured with the block docs/operations.md
 * shows ("Behind a reverse proxy"), read from the page as it stands with only its two ports
 * replaced. 600 workers long-poll through it for the full 60 s from three client addresses
 * (127.0.0.11–13, 200 each: under the default limit of 256 per address, over it for the one
 * address nginx connects from), beside an event stream, submits, completions and webhook
 * deliveries. Nothing may be refused or cut, events must arrive while the stream stays open, and a
 * webhook run must carry the client's address even when the client sent its own X-Forwarded-For.
 *
 * nginx runs as this test's child with its own prefix, configuration and logs in a temporary
 * directory, never as the system service. Missing, it is installed the way .ci/run installs it.
 * BATON_TEST_PORTS=FROM-TO makes the test take its ports from that range (a shared machine).
 */
import { execSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request, type IncomingMessage } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { counterValue, requestFrom, type Answer } from '../helpers/http-from.ts';
import { freePort, startBatonUp, type Child } from '../helpers/process.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const NGINX = '/usr/sbin/nginx';
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const WORKERS = 600;
const CLIENTS = ['127.0.0.11', '127.0.0.12', '127.0.0.13'];
const TASKS = 290;
const DELIVERIES = 10;

/** The nginx block of docs/operations.md, as it stands there. */
export function documentedNginxConfig(): string {
  const page = readFileSync(join(ROOT, 'docs/operations.md'), 'utf8');
  const at = page.indexOf('<!-- test/server/nginx.test.ts runs the block below');
  const start = page.indexOf('```nginx\n', at);
  if (at < 0 || start < 0) throw new Error('docs/operations.md has no nginx block marked for test/server/nginx.test.ts');
  return page.slice(start + '```nginx\n'.length, page.indexOf('\n```', start) + 1);
}

/** `text` with `from` replaced by `to`, where `from` occurs exactly once. */
function replaceOnce(text: string, from: string, to: string): string {
  const parts = text.split(from);
  if (parts.length !== 2) throw new Error(`the documented nginx block must contain '${from}' exactly once`);
  return parts.join(to);
}

async function port(): Promise<number> {
  const range = process.env.BATON_TEST_PORTS?.match(/^(\d+)-(\d+)$/);
  if (!range) return freePort();
  for (let p = Number(range[1]) + Math.floor(Math.random() * 50); p <= Number(range[2]); p++) {
    const free = await new Promise<boolean>((resolve) => {
      const srv = createServer();
      srv.once('error', () => resolve(false));
      srv.listen(p, '127.0.0.1', () => srv.close(() => resolve(true)));
    });
    if (free) return p;
  }
  throw new Error(`no free port in BATON_TEST_PORTS=${process.env.BATON_TEST_PORTS}`);
}

function ensureNginx(): void {
  if (existsSync(NGINX)) return;
  // As .ci/run does; it needs root, and says so when it fails.
  execSync('apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null', { stdio: 'inherit' });
  if (!existsSync(NGINX)) throw new Error(`${NGINX} is missing: apt-get install nginx (.ci/run does it)`);
}

let ts: TestStore;
let dir: string;
let baton: Child & { url: string };
let nginx: ChildProcess | undefined;
let nginxExited: Promise<void>;
let front: string;
let key: string;

beforeAll(async () => {
  ensureNginx();
  ts = await openTestStore();
  dir = mkdtempSync(join(tmpdir(), 'baton-nginx-'));
  baton = await startBatonUp({ ...ts.env, BATON_TRUSTED_PROXIES: '127.0.0.1', BATON_CANARY_INTERVAL_MS: '0' }, await port());
  key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
  const nginxPort = await port();
  let site = replaceOnce(documentedNginxConfig(), 'server 127.0.0.1:7070;', `server 127.0.0.1:${new URL(baton.url).port};`);
  site = replaceOnce(site, 'listen 8080;', `listen 127.0.0.1:${nginxPort};`);
  writeFileSync(join(dir, 'baton.conf'), site);
  // The main configuration a distribution would have, with everything in this directory.
  writeFileSync(
    join(dir, 'nginx.conf'),
    [
      'daemon off;',
      'worker_processes 1;',
      'worker_rlimit_nofile 8192;',
      `pid ${dir}/nginx.pid;`,
      `error_log ${dir}/error.log warn;`,
      'events { worker_connections 4096; }',
      'http {',
      `  access_log ${dir}/access.log;`,
      ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `  ${t}_temp_path ${dir}/${t};`),
      `  include ${dir}/baton.conf;`,
      '}',
    ].join('\n'),
  );
  nginx = spawn(NGINX, ['-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  nginx.stdout!.on('data', (d) => (out += d));
  nginx.stderr!.on('data', (d) => (out += d));
  nginxExited = new Promise((r) => nginx!.once('exit', () => r()));
  front = `http://127.0.0.1:${nginxPort}`;
  for (const deadline = Date.now() + 30_000; ;) {
    if (nginx.exitCode !== null) throw new Error(`nginx exited:\n${out}`);
    const up = await requestFrom(`${front}/readyz`).catch(() => undefined);
    if (up?.status === 200) break;
    if (Date.now() > deadline) throw new Error(`nginx did not answer:\n${out}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}, 120_000);

afterAll(async () => {
  if (nginx && nginx.exitCode === null) {
    nginx.kill('SIGTERM');
    await nginxExited;
  }
  if (baton && baton.proc.exitCode === null) {
    baton.proc.kill('SIGTERM');
    const t = setTimeout(() => baton.proc.kill('SIGKILL'), 10_000);
    await baton.exited;
    clearTimeout(t);
  }
  await ts?.cleanup();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const auth = () => ({ authorization: `Bearer ${key}` });

/** An SSE stream through nginx: the events seen so far, while it stays open. */
function openEvents(url: string): Promise<{ events: Array<{ id: string; status: string }>; res: IncomingMessage; close(): void }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { ...auth(), accept: 'text/event-stream' }, localAddress: '127.0.0.14', agent: false }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`event stream answered ${res.statusCode}`));
      const events: Array<{ id: string; status: string }> = [];
      let buffered = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffered += chunk;
        let end: number;
        while ((end = buffered.indexOf('\n\n')) >= 0) {
          const message = buffered.slice(0, end);
          buffered = buffered.slice(end + 2);
          const data = message.split('\n').find((l) => l.startsWith('data: '));
          if (message.startsWith('event: execution') && data) events.push(JSON.parse(data.slice(6)));
        }
      });
      resolve({ events, res, close: () => req.destroy() });
    });
    req.on('error', reject);
    req.end();
  });
}

async function until(what: string, ok: () => boolean, timeoutMs = 30_000): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; !ok();) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe(`baton up behind nginx, configured as docs/operations.md shows (${STORE_KIND})`, () => {
  it('600 long-polling workers, an event stream and webhooks: nothing refused, no long-poll cut, events as they happen', async () => {
    const api = (path: string, body?: unknown, localAddress = '127.0.0.14', headers: Record<string, string> = {}) =>
      requestFrom(`${front}${path}`, { body, localAddress, headers: { ...auth(), ...headers } });
    expect((await api('/v1/agents', { name: 'nx', max_parallel: 1000, max_backlog: 1000 })).status).toBe(201);
    const hook = JSON.parse((await api('/v1/webhooks', { name: 'nx-hook', agent: 'nx' })).body) as { path: string };
    const stream = await openEvents(`${front}/v1/events?agent=nx`);

    // Each worker: one claim that waits the longest a claim may (60 s); a task, when it gets one, is completed.
    const agents = CLIENTS.map((localAddress) => new Agent({ keepAlive: true, maxSockets: Infinity, localAddress }));
    const outcomes: Array<{ claim: number; complete?: number; error?: string }> = [];
    const workers = Array.from({ length: WORKERS }, async (_, i) => {
      const agent = agents[i % agents.length]!;
      const call = (path: string, body: unknown): Promise<Answer> => requestFrom(`${front}${path}`, { body, agent, headers: auth() });
      try {
        const claimed = await call('/v1/agents/nx/claim', { wait_seconds: 60, worker_id: `w${i}` });
        const outcome: { claim: number; complete?: number } = { claim: claimed.status };
        if (claimed.status === 200) {
          const [task] = JSON.parse(claimed.body).tasks as Array<{ execution_id: string; lease_token: string }>;
          const done = await call(`/v1/executions/${task!.execution_id}/complete`, { lease_token: task!.lease_token, status: 'succeeded' });
          outcome.complete = done.status;
        }
        outcomes.push(outcome);
      } catch (err) {
        outcomes.push({ claim: 0, error: String(err) });
      }
    });

    // The first submit's change arrives on the open stream before anything else is sent.
    const first = JSON.parse((await api('/v1/agents/nx/executions', { message: 'first' })).body).execution_id as string;
    await until('the first event on the stream', () => stream.events.some((e) => e.id === first));
    expect(stream.res.complete).toBe(false);
    const submitted = [first];
    for (let i = 1; i < TASKS; i++) {
      const r = await api('/v1/agents/nx/executions', { message: `t${i}` });
      expect(r.status, r.body).toBeLessThan(300);
      submitted.push(JSON.parse(r.body).execution_id);
    }
    // Deliveries from a client that forges its own X-Forwarded-For: nginx appends its peer, Baton believes only that.
    for (let i = 0; i < DELIVERIES; i++) {
      const r = await requestFrom(`${front}${hook.path}`, {
        body: { i },
        localAddress: '127.0.0.15',
        headers: { 'x-forwarded-for': '203.0.113.9' },
      });
      expect(r.status, r.body).toBeLessThan(300);
      const e = JSON.parse((await api(`/v1/executions/${JSON.parse(r.body).execution_id}`, undefined)).body);
      expect(e.origin.source_address).toBe('127.0.0.15');
      submitted.push(e.id);
    }

    await Promise.all(workers);
    for (const a of agents) a.destroy();
    const byClaim = (s: number) => outcomes.filter((o) => o.claim === s).length;
    expect(
      outcomes.filter((o) => o.error),
      JSON.stringify(outcomes.filter((o) => o.error).slice(0, 3)),
    ).toEqual([]);
    // Every submitted task went to one worker and was completed through nginx; every other worker
    // held its claim for the whole 60 s and was answered 204 by Baton, not 504 by nginx.
    const tally: Record<string, number> = {};
    for (const o of outcomes)
      tally[`claim ${o.claim}, complete ${o.complete ?? '-'}`] = (tally[`claim ${o.claim}, complete ${o.complete ?? '-'}`] ?? 0) + 1;
    const answers = JSON.stringify(tally);
    expect(byClaim(200), answers).toBe(TASKS + DELIVERIES);
    expect(byClaim(204), answers).toBe(WORKERS - TASKS - DELIVERIES);
    expect(outcomes.filter((o) => o.claim === 200 && o.complete !== 200)).toEqual([]);
    // Each execution's succeeded change reached the stream, which is still open.
    await until('every succeeded event', () => submitted.every((id) => stream.events.some((e) => e.id === id && e.status === 'succeeded')));
    expect(stream.res.complete).toBe(false);
    stream.close();

    const metrics = (await requestFrom(`${baton.url}/metrics`)).body;
    expect(counterValue(metrics, 'baton_connections_refused_total{via="socket"}')).toBe(0);
    expect(counterValue(metrics, 'baton_connections_refused_total{via="proxy"}')).toBe(0);
    const log = readFileSync(join(dir, 'error.log'), 'utf8');
    expect(log).not.toMatch(/upstream timed out|upstream prematurely closed|no live upstreams|worker_connections are not enough/);
  }, 240_000);
});
