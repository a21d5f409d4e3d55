/**
 * What the reverse-proxy test (test/server/proxies.test.ts) runs through each proxy: the proxy's
 * configuration read from docs/operations.md as it stands, ports, and the traffic run through the
 * proxy with its checks.
 */
import { execSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { Agent, request, type IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { counterValue, requestFrom, type Answer } from './http-from.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** The fenced `lang` block of docs/operations.md that follows the comment naming `testFile`. */
export function documentedBlock(lang: string, testFile: string): string {
  const page = readFileSync(join(ROOT, 'docs/operations.md'), 'utf8');
  const at = page.indexOf(`<!-- ${testFile} runs the block below`);
  const start = page.indexOf('```' + lang + '\n', at);
  if (at < 0 || start < 0) throw new Error(`docs/operations.md has no ${lang} block marked for ${testFile}`);
  return page.slice(start + lang.length + 4, page.indexOf('\n```', start) + 1);
}

/** `text` with `from` replaced by `to`, where `from` occurs exactly once. */
export function replaceOnce(text: string, from: string, to: string): string {
  const parts = text.split(from);
  if (parts.length !== 2) throw new Error(`the documented block must contain '${from}' exactly once`);
  return parts.join(to);
}

export async function until(what: string, ok: () => boolean, timeoutMs = 30_000): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; !ok();) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Poll `url` until it answers 200, while `alive()` says the proxy process runs. */
export async function untilAnswering(url: string, alive: () => boolean, output: () => string): Promise<void> {
  for (const deadline = Date.now() + 30_000; ;) {
    if (!alive()) throw new Error(`the proxy exited:\n${output()}`);
    const up = await requestFrom(url).catch(() => undefined);
    if (up?.status === 200) return;
    if (Date.now() > deadline) throw new Error(`the proxy did not answer:\n${output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface Stream {
  events: Array<{ id: string; status: string }>;
  res: IncomingMessage;
  close(): void;
}

/** An SSE stream: the `execution` events seen so far, while it stays open. */
function openEvents(url: string, key: string, localAddress: string): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const headers = { authorization: `Bearer ${key}`, accept: 'text/event-stream' };
    const req = request(url, { headers, localAddress, agent: false }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`event stream answered ${res.statusCode}`));
      const events: Stream['events'] = [];
      let buffered = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffered += chunk;
        for (let end = buffered.indexOf('\n\n'); end >= 0; end = buffered.indexOf('\n\n')) {
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

export interface Traffic {
  /** The proxy's URL. */
  front: string;
  /** Baton's own URL (for /metrics). */
  baton: string;
  key: string;
  /** Long-polling workers, spread over `clients` (their source addresses). */
  workers: number;
  clients: string[];
  /** Tasks submitted, and webhook deliveries (each one more task). */
  tasks: number;
  deliveries: number;
}

/**
 * Every worker sends one claim that waits the longest a claim may (60 s), and completes the task it
 * gets; an event stream stays open meanwhile; tasks are submitted and webhooks delivered by a
 * client that forges its own X-Forwarded-For. Checks: no request refused or failed, every task
 * claimed and completed once, every other claim held its 60 s and was answered 204 by Baton (not
 * cut by the proxy), events arrived while the stream stayed open, each webhook run carries the
 * client's real address, and Baton counted no refusal.
 */
export async function runThroughProxy(t: Traffic): Promise<void> {
  const auth = { authorization: `Bearer ${t.key}` };
  const api = (path: string, body?: unknown) => requestFrom(`${t.front}${path}`, { body, localAddress: '127.0.0.14', headers: auth });
  expect((await api('/v1/agents', { name: 'nx', max_parallel: 1000, max_backlog: 1000 })).status).toBe(201);
  const hook = JSON.parse((await api('/v1/webhooks', { name: 'nx-hook', agent: 'nx' })).body) as { path: string };
  const stream = await openEvents(`${t.front}/v1/events?agent=nx`, t.key, '127.0.0.14');

  const agents = t.clients.map((localAddress) => new Agent({ keepAlive: true, maxSockets: Infinity, localAddress }));
  const outcomes: Array<{ claim: number; complete?: number; error?: string }> = [];
  const workers = Array.from({ length: t.workers }, async (_, i) => {
    const agent = agents[i % agents.length]!;
    const call = (path: string, body: unknown): Promise<Answer> => requestFrom(`${t.front}${path}`, { body, agent, headers: auth });
    try {
      const claimed = await call('/v1/agents/nx/claim', { wait_seconds: 60, worker_id: `w${i}` });
      const outcome: { claim: number; complete?: number } = { claim: claimed.status };
      if (claimed.status === 200) {
        const [task] = JSON.parse(claimed.body).tasks as Array<{ execution_id: string; lease_token: string }>;
        outcome.complete = (
          await call(`/v1/executions/${task!.execution_id}/complete`, { lease_token: task!.lease_token, status: 'succeeded' })
        ).status;
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
  for (let i = 1; i < t.tasks; i++) {
    const r = await api('/v1/agents/nx/executions', { message: `t${i}` });
    expect(r.status, r.body).toBeLessThan(300);
    submitted.push(JSON.parse(r.body).execution_id);
  }
  // Deliveries from a client that forges its own X-Forwarded-For: Baton believes only what the proxy vouches for.
  for (let i = 0; i < t.deliveries; i++) {
    const r = await requestFrom(`${t.front}${hook.path}`, {
      body: { i },
      localAddress: '127.0.0.15',
      headers: { 'x-forwarded-for': '203.0.113.9' },
    });
    expect(r.status, r.body).toBeLessThan(300);
    const e = JSON.parse((await api(`/v1/executions/${JSON.parse(r.body).execution_id}`)).body);
    expect(e.origin.source_address).toBe('127.0.0.15');
    submitted.push(e.id);
  }

  await Promise.all(workers);
  for (const a of agents) a.destroy();
  const failed = outcomes.filter((o) => o.error);
  expect(failed, JSON.stringify(failed.slice(0, 3))).toEqual([]);
  const tally: Record<string, number> = {};
  for (const o of outcomes) {
    const k = `claim ${o.claim}, complete ${o.complete ?? '-'}`;
    tally[k] = (tally[k] ?? 0) + 1;
  }
  const claimed = t.tasks + t.deliveries;
  expect(tally, 'how the claims were answered').toEqual({
    'claim 200, complete 200': claimed,
    'claim 204, complete -': t.workers - claimed,
  });
  // Each execution's succeeded change reached the stream, which is still open.
  await until('every succeeded event', () => submitted.every((id) => stream.events.some((e) => e.id === id && e.status === 'succeeded')));
  expect(stream.res.complete).toBe(false);
  stream.close();

  const metrics = (await requestFrom(`${t.baton}/metrics`)).body;
  expect(counterValue(metrics, 'baton_connections_refused_total{via="socket"}')).toBe(0);
  expect(counterValue(metrics, 'baton_connections_refused_total{via="proxy"}')).toBe(0);
}

/** `bin` from Debian's package `pkg`, installed as .ci/run does when missing (that needs root; it says so when it fails). */
export function ensureDebianBinary(bin: string, pkg: string): void {
  if (existsSync(bin)) return;
  execSync(`apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${pkg} >/dev/null`, { stdio: 'inherit' });
  if (!existsSync(bin)) throw new Error(`${bin} is missing: apt-get install ${pkg} (.ci/run does it)`);
}

/** A proxy running as this test's child, answering at `front`; stop() ends it. */
export interface Front {
  front: string;
  stop(): Promise<void>;
}

/** Spawn the proxy and wait until `front`/readyz answers through it (its output is shown if it dies first). */
export async function startFront(front: string, bin: string, args: string[], opts: SpawnOptions = {}): Promise<Front> {
  const child: ChildProcess = spawn(bin, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    await exited;
  };
  try {
    await untilAnswering(
      `${front}/readyz`,
      () => child.exitCode === null,
      () => out,
    );
  } catch (err) {
    await stop();
    throw err;
  }
  return { front, stop };
}
