/**
 * The per-address connection limit and trusted proxies, on a real `baton up` (in process) on each
 * store. Clients on this machine take distinct loopback addresses (127.0.0.2 …) so that the
 * server sees several: 127.0.0.1 is the one trusted proxy, anything else is a direct client.
 */
import { connect, type Socket } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { BatonClient } from '../../src/client.ts';
import { ConfigError, readConfig, readTrustedProxies } from '../../src/config.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { startNode } from '../../src/server/up.ts';
import { BatonClient as Client } from '../../src/client.ts';
import { counterValue, requestFrom } from '../helpers/http-from.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const CAP = 3;
let ts: TestStore;
let node: BatonNode;
let api: BatonClient;
let key: string;
const logLines: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  ts = await openTestStore();
  // One webhook delivery a second per address (burst 2): the rate per address is observable.
  vi.stubEnv('BATON_HOOK_RATE_PER_ADDRESS', '1');
  vi.stubEnv('BATON_HOOK_RATE_PER_WEBHOOK', '1000');
  const logger = pino({ level: 'warn' }, { write: (line: string) => void logLines.push(JSON.parse(line)) });
  node = await startNode({
    env: ts.nodeEnv,
    logger,
    dispatcher: false,
    limits: { maxConnectionsPerAddress: CAP },
    trustedProxies: readTrustedProxies({ BATON_TRUSTED_PROXIES: '127.0.0.1' }),
  });
  vi.unstubAllEnvs();
  key = node.createdAdminKey!;
  api = new Client({ server: node.url, key });
  await api.createAgent({ name: 'px', max_parallel: 50, max_backlog: 1000 });
});
afterAll(async () => {
  await node?.stop();
  await ts?.cleanup();
});

const refusals = async () => {
  const text = (await requestFrom(`${node.url}/metrics`)).body;
  return {
    socket: counterValue(text, 'baton_connections_refused_total{via="socket"}'),
    proxy: counterValue(text, 'baton_connections_refused_total{via="proxy"}'),
  };
};
const refusalLines = () => logLines.filter((l) => l.msg === 'connections refused over the per-address limit');

/** A claim that parks (nothing queued) for `seconds`, sent as `client` through the trusted 127.0.0.1. */
const claimVia = (client: string, seconds: number) =>
  requestFrom(`${node.url}/v1/agents/px/claim`, {
    localAddress: '127.0.0.1',
    headers: { authorization: `Bearer ${key}`, 'x-forwarded-for': client },
    body: { wait_seconds: seconds, worker_id: `w-${client}` },
  });

function openSocket(localAddress: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port: Number(new URL(node.url).port), localAddress }, () => resolve(s));
    s.once('error', reject);
  });
}
const closed = (s: Socket) => new Promise<void>((r) => (s.closed ? r() : s.once('close', () => r())));

describe(`settings (${STORE_KIND})`, () => {
  it('reads BATON_MAX_CONNECTIONS_PER_ADDRESS and BATON_TRUSTED_PROXIES, and refuses bad values naming the variable', () => {
    const config = readConfig({ BATON_MAX_CONNECTIONS_PER_ADDRESS: '1000', BATON_TRUSTED_PROXIES: '10.0.0.0/8, fd00::/8 loopback' });
    expect(config.network.maxConnectionsPerAddress).toBe(1000);
    expect(config.network.trustedProxies).toEqual([
      { address: '10.0.0.0', prefix: 8, family: 'ipv4' },
      { address: 'fd00::', prefix: 8, family: 'ipv6' },
      { address: '127.0.0.0', prefix: 8, family: 'ipv4' },
      { address: '::1', prefix: 128, family: 'ipv6' },
    ]);
    expect(readConfig({}).network).toEqual({ maxConnectionsPerAddress: 256, trustedProxies: [] });
    for (const [name, value] of [
      ['BATON_MAX_CONNECTIONS_PER_ADDRESS', '0'],
      ['BATON_MAX_CONNECTIONS_PER_ADDRESS', '12.5'],
      ['BATON_TRUSTED_PROXIES', '10.0.0.0/33'],
      ['BATON_TRUSTED_PROXIES', 'proxy.example.com'],
      ['BATON_TRUSTED_PROXIES', '10.0.0.1/8/2'],
    ] as const) {
      let err: unknown;
      try {
        readConfig({ [name]: value });
      } catch (e) {
        err = e;
      }
      expect(err, `${name}=${value}`).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).variable).toBe(name);
      expect((err as Error).message).toContain(name);
    }
  });
});

describe(`the per-address limit and trusted proxies (${STORE_KIND})`, () => {
  it('closes a direct client’s connection over the limit, counts it and logs it once', async () => {
    const before = await refusals();
    const sockets = await Promise.all(Array.from({ length: CAP + 1 }, () => openSocket('127.0.0.2')));
    // The server closes one of them at once; the others stay usable.
    await Promise.race(sockets.map(closed));
    const open = sockets.filter((s) => !s.closed);
    expect(open).toHaveLength(CAP);
    expect((await refusals()).socket - before.socket).toBe(1);
    expect(refusalLines()).toHaveLength(1);
    expect(refusalLines()[0]).toMatchObject({ address: '127.0.0.2', via: 'socket', refused: 1, limit: CAP });
    for (const s of open) s.destroy();
    await Promise.all(open.map(closed));
  });

  it('counts requests through the trusted proxy by client address: the one over the limit gets 429, another client is not held', async () => {
    const before = await refusals();
    // CAP parked claims from one client, through one proxy (each on its own connection from 127.0.0.1).
    const parked = Array.from({ length: CAP }, () => claimVia('198.51.100.7', 20));
    // Until all CAP are counted (a claim that arrives before is answered 204 at once: nothing queued).
    let over = await claimVia('198.51.100.7', 0);
    for (const deadline = Date.now() + 15_000; over.status === 204 && Date.now() < deadline;) over = await claimVia('198.51.100.7', 0);
    expect(over.status, over.body).toBe(429);
    expect(JSON.parse(over.body)).toMatchObject({ error: 'too_many_connections', limit: CAP });
    expect(JSON.parse(over.body).message).toContain('BATON_MAX_CONNECTIONS_PER_ADDRESS');
    // Another client behind the same proxy, and more proxy connections than CAP in all: not refused.
    const other = await claimVia('198.51.100.8', 0);
    expect(other.status, other.body).toBe(204);
    const after = await refusals();
    expect(after.proxy - before.proxy).toBe(1);
    expect(after.socket).toBe(before.socket);
    // Within the minute since the last line: counted, not logged again.
    expect(refusalLines()).toHaveLength(1);
    // Work for the parked claims: they end, and the client may claim again.
    for (let i = 0; i < CAP; i++) await api.submit('px', { message: `t${i}` });
    for (const a of await Promise.all(parked)) expect(a.status, a.body).toBe(200);
    expect((await claimVia('198.51.100.7', 0)).status).toBe(204);
  });

  it('takes the client address from X-Forwarded-For only from a trusted proxy: a direct client’s header is ignored', async () => {
    const hook = await api.createWebhook({ name: 'from', agent: 'px' });
    const deliver = async (localAddress: string) => {
      const a = await requestFrom(`${node.url}${hook.path}`, {
        localAddress,
        headers: { 'x-forwarded-for': '203.0.113.9' },
        body: { a: 1 },
      });
      expect(a.status, a.body).toBeLessThan(300);
      const e = await api.getExecution(JSON.parse(a.body).execution_id);
      return (e.origin as { source_address: string }).source_address;
    };
    expect(await deliver('127.0.0.3')).toBe('127.0.0.3');
    expect(await deliver('127.0.0.1')).toBe('203.0.113.9');
    // Two hops: the proxy appends its peer; the client's own entry, left of an untrusted hop, is not believed.
    const twoHops = await requestFrom(`${node.url}${hook.path}`, {
      localAddress: '127.0.0.1',
      headers: { 'x-forwarded-for': '203.0.113.9, 127.0.0.4' },
      body: { a: 2 },
    });
    const e = await api.getExecution(JSON.parse(twoHops.body).execution_id);
    expect((e.origin as { source_address: string }).source_address).toBe('127.0.0.4');
  });

  it('rates webhook deliveries by the forwarded client address: one client slowed down leaves another behind the same proxy alone', async () => {
    const hook = await api.createWebhook({ name: 'rated', agent: 'px' });
    const deliverAs = (client: string) =>
      requestFrom(`${node.url}${hook.path}`, { localAddress: '127.0.0.1', headers: { 'x-forwarded-for': client }, body: {} });
    let answer = await deliverAs('198.51.100.20');
    for (let i = 0; i < 20 && answer.status !== 429; i++) answer = await deliverAs('198.51.100.20');
    expect(answer.status, answer.body).toBe(429);
    expect(JSON.parse(answer.body).error).toBe('rate_limited');
    const other = await deliverAs('198.51.100.21');
    expect(other.status, other.body).toBeLessThan(300);
  });
});
