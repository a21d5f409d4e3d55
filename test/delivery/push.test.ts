/**
 * Push delivery against real local HTTP agents: success with usage, 4xx, 5xx, an answer that
 * comes after the deadline, a hang, signatures, cancellation aborting the request, a refused
 * connection (its stored error naming the URL redacted), an error page echoing the URL's path
 * (its token and query redacted), and the push secret never leaving the
 * server in plain text.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError, type BatonClient } from '../../src/client.ts';
import { Dispatcher } from '../../src/delivery/dispatcher.ts';
import { secretBoxFromKey } from '../../src/delivery/secrets.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { startTestNode, until } from '../helpers/delivery.ts';
import { freePort } from '../helpers/process.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let node: BatonNode;
let api: BatonClient;

interface Seen {
  headers: IncomingMessage['headers'];
  body: any;
  raw: string;
  closedEarly: boolean;
}
const servers: Server[] = [];

/** A local agent: `answer` decides what to do with each request; every request is recorded. */
async function agentServer(answer: (req: Seen, res: ServerResponse) => void): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      const s: Seen = { headers: req.headers, raw, body: JSON.parse(raw), closedEarly: false };
      res.on('close', () => {
        if (!res.writableFinished) s.closedEarly = true;
      });
      seen.push(s);
      answer(s, res);
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}/task`, seen };
}
const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
};

beforeAll(async () => {
  ts = await openTestStore();
  ({ node, api } = await startTestNode(ts, { dispatcher: { shutdownGraceMs: 500 } }));
});
afterAll(async () => {
  await node?.stop();
  for (const s of servers) s.closeAllConnections();
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  await ts?.cleanup();
});

const terminal = (id: string) => api.waitFor(id, { timeoutMs: 30_000, intervalMs: 100 });

describe('push delivery', () => {
  it('POSTs the task with Idempotency-Key and attempt; a 2xx answer decides the outcome, usage included', async () => {
    const a = await agentServer((s, res) =>
      json(res, 200, {
        status: 'succeeded',
        result: { echo: s.body.message },
        usage: { input_tokens: 12, output_tokens: 5, cost_usd: 0.0021 },
      }),
    );
    await api.createAgent({ name: 'push-ok', delivery: 'push', push_url: a.url, max_parallel: 2 });
    const { execution_id } = await api.submit('push-ok', { message: 'hello', payload: { k: [1, 2] } });
    const e = await terminal(execution_id);
    expect(e.status).toBe('succeeded');
    expect(e.result).toEqual({ echo: 'hello' });
    expect(e.usage).toEqual({ input_tokens: 12, output_tokens: 5, cost_usd: 0.0021 });
    expect(e.attempt).toBe(1);
    expect(e.lease_owner).toBe(node.engine.nodeId);
    expect(a.seen).toHaveLength(1);
    const [req] = a.seen;
    expect(req!.headers['idempotency-key']).toBe(execution_id);
    expect(req!.headers['x-baton-attempt']).toBe('1');
    expect(req!.headers['x-baton-signature']).toBeUndefined();
    expect(req!.body).toEqual({
      execution_id,
      attempt: 1,
      agent: 'push-ok',
      message: 'hello',
      payload: { k: [1, 2] },
      deadline: e.deadline_at,
    });

    // The agent may also report failure in a 2xx body.
    const b = await agentServer((_s, res) => json(res, 200, { status: 'failed', error: { code: 'model_refused', message: 'no can do' } }));
    // An agent of its own: a push_url changed just before a submit may still be the old one in a pass under way.
    await api.createAgent({ name: 'push-ok-failing', delivery: 'push', push_url: b.url });
    const second = await api.submit('push-ok-failing', { message: 'again' });
    const e2 = await terminal(second.execution_id);
    expect(e2.status).toBe('failed');
    expect(e2.error).toEqual({ code: 'model_refused', message: 'no can do' });
  });

  it('4xx → failed and not re-delivered; 5xx → failed with the status; both say what the agent answered', async () => {
    const rejecting = await agentServer((_s, res) => json(res, 422, { error: 'bad task' }));
    await api.createAgent({ name: 'push-4xx', delivery: 'push', push_url: rejecting.url });
    const r4 = await api.submit('push-4xx', { message: 'x' });
    const e4 = await terminal(r4.execution_id);
    expect(e4.status).toBe('failed');
    expect(e4.error?.code).toBe('push_rejected');
    expect(e4.error?.message).toContain('HTTP 422');
    expect(e4.error?.message).toContain('bad task');
    expect(e4.attempt).toBe(1);

    const broken = await agentServer((_s, res) => json(res, 503, ''));
    await api.createAgent({ name: 'push-5xx', delivery: 'push', push_url: broken.url });
    const r5 = await api.submit('push-5xx', { message: 'x' });
    const e5 = await terminal(r5.execution_id);
    expect(e5.status).toBe('failed');
    expect(e5.error?.code).toBe('push_server_error');
    expect(e5.error?.message).toContain('HTTP 503');
    expect(rejecting.seen).toHaveLength(1);
  });

  it('under a retry policy a 5xx is retried and a 4xx is not', async () => {
    const answers = [503, 200];
    const flaky = await agentServer((_s, res) => json(res, answers.shift() ?? 200, { status: 'succeeded', result: 'second time lucky' }));
    const policy = { max_attempts: 3, base_seconds: 0, jitter: 0 };
    await api.createAgent({ name: 'push-retry-5xx', delivery: 'push', push_url: flaky.url, retry_policy: policy });
    const first = await api.submit('push-retry-5xx', { message: 'x' });
    const failed = await terminal(first.execution_id);
    expect(failed.status).toBe('failed');
    const chain = await until('the retry to exist', async () => {
      const c = (await api.getExecution(first.execution_id)).retry_chain;
      return c.length === 2 ? c : undefined;
    });
    const retried = await terminal(chain[1]!);
    expect(retried.status).toBe('succeeded');
    expect(retried.result).toBe('second time lucky');

    const rejecting = await agentServer((_s, res) => json(res, 400, { error: 'never' }));
    await api.createAgent({ name: 'push-retry-4xx', delivery: 'push', push_url: rejecting.url, retry_policy: policy });
    const r = await api.submit('push-retry-4xx', { message: 'x' });
    const e = await terminal(r.execution_id);
    expect(e.error?.code).toBe('push_rejected');
    expect((await api.getExecution(r.execution_id)).retry_chain).toEqual([r.execution_id]);
  });

  it('an answer after the deadline, and a hang, fail as timeouts that say after how long', async () => {
    const slow = await agentServer((_s, res) => {
      const t = setTimeout(() => json(res, 200, { status: 'succeeded', result: 'too late' }), 3_000);
      res.on('close', () => clearTimeout(t));
    });
    const hang = await agentServer(() => {
      /* never answers */
    });
    await api.createAgent({ name: 'push-slow', delivery: 'push', push_url: slow.url, timeout_seconds: 1 });
    await api.createAgent({ name: 'push-hang', delivery: 'push', push_url: hang.url, timeout_seconds: 1 });
    const [s, h] = await Promise.all([api.submit('push-slow', { message: 'x' }), api.submit('push-hang', { message: 'x' })]);
    for (const id of [s.execution_id, h.execution_id]) {
      const e = await terminal(id);
      expect(e.status).toBe('failed');
      expect(e.error?.code).toBe('timeout');
      expect(e.error?.message).toMatch(/timed out|timeout/);
      expect(e.error?.message).toMatch(/\d+(\.\d+)? s/);
      expect(e.result).toBeNull();
    }
    await until('the hanging request to be aborted', () => hang.seen[0]?.closedEarly);
  });

  it('a long result is checked off the event loop and stored as JSON.stringify writes it; one that is not JSON fails the run', async () => {
    let k = 0;
    const rows = Array.from({ length: 10_000 }, () => Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`key${k++}`, i])));
    // Indented, with a long member nobody reads: stored without the spaces, the extra skipped.
    const answer = JSON.stringify({ status: 'succeeded', result: { rows }, debug: rows.slice(0, 3_000) }, null, 1);
    expect(answer.length).toBeGreaterThan(256 * 1024);
    const a = await agentServer((_s, res) => json(res, 200, answer));
    await api.createAgent({ name: 'push-long', delivery: 'push', push_url: a.url });
    const ok = await terminal((await api.submit('push-long', { message: 'long' })).execution_id);
    expect(ok.status).toBe('succeeded');
    expect(ok.result).toEqual({ rows });
    const b = await agentServer((_s, res) => json(res, 200, `{"status":"succeeded","result":[${JSON.stringify(rows).slice(1, -1)},]}`));
    // An agent of its own: a push_url changed just before a submit may still be the old one in a pass under way.
    await api.createAgent({ name: 'push-broken', delivery: 'push', push_url: b.url });
    const bad = await terminal((await api.submit('push-broken', { message: 'broken' })).execution_id);
    expect(bad.status).toBe('failed');
    expect(bad.error).toMatchObject({
      code: 'push_invalid_response',
      message: expect.stringMatching(/^HTTP 200 but the body's result is not JSON: /),
    });
  });

  it('signs the body with the agent secret; the secret is stored encrypted and never returned', async () => {
    const secret = 'push-secret-0123456789abcdef';
    const checking = await agentServer((s, res) => {
      const expected = `sha256=${createHmac('sha256', secret).update(s.raw).digest('hex')}`;
      if (s.headers['x-baton-signature'] !== expected) return json(res, 401, { error: 'bad signature' });
      json(res, 200, { status: 'succeeded', result: 'verified' });
    });
    const created = await api.createAgent({ name: 'push-signed', delivery: 'push', push_url: checking.url, push_secret: secret });
    expect(JSON.stringify(created)).not.toContain(secret);
    expect(created.push_signed).toBe(true);
    expect(JSON.stringify(await api.getAgent('push-signed'))).not.toContain(secret);
    const stored = await ts.store.db.selectFrom('agents').select('push_secret').where('name', '=', 'push-signed').executeTakeFirstOrThrow();
    expect(stored.push_secret).toBeTruthy();
    expect(stored.push_secret).not.toContain(secret);

    const ok = await api.submit('push-signed', { message: 'x' });
    expect((await terminal(ok.execution_id)).result).toBe('verified');

    // Same endpoint, wrong secret on the Baton side: the agent refuses the signature.
    await api.createAgent({ name: 'push-missigned', delivery: 'push', push_url: checking.url, push_secret: 'another-secret-0123456789' });
    const bad = await api.submit('push-missigned', { message: 'x' });
    const e = await terminal(bad.execution_id);
    expect(e.status).toBe('failed');
    expect(e.error?.message).toContain('HTTP 401');
  });

  it('a secret sealed with another BATON_SECRET_KEY fails as push_secret_unreadable, logged, without a request', async () => {
    const agentSide = await agentServer((_s, res) => json(res, 200, { status: 'succeeded' }));
    await api.createAgent({
      name: 'push-other-key',
      delivery: 'push',
      push_url: agentSide.url,
      push_secret: 'sealed-elsewhere-0123456789',
    });
    // What another process, with its own secret.key, would have stored.
    const elsewhere = secretBoxFromKey(randomBytes(32)).seal('sealed-elsewhere-0123456789');
    await ts.store.db.updateTable('agents').set({ push_secret: elsewhere }).where('name', '=', 'push-other-key').execute();
    const logged: unknown[] = [];
    const onError = ({ loop, error }: { loop: string; error: unknown }) => loop === 'dispatcher' && logged.push(error);
    node.engine.events.on('loop:error', onError);
    try {
      const e = await terminal((await api.submit('push-other-key', { message: 'x' })).execution_id);
      expect(e.status).toBe('failed');
      expect(e.error?.code).toBe('push_secret_unreadable');
      expect(e.error?.message).toMatch(/BATON_SECRET_KEY/);
      expect(agentSide.seen).toHaveLength(0);
      expect(String(logged[0])).toMatch(/cannot decrypt a stored secret/);
    } finally {
      node.engine.events.off('loop:error', onError);
    }
  });

  it('an agent deleted between a pass reading the push agents and claiming for it is skipped, not a dispatcher failure', async () => {
    await api.createAgent({ name: 'push-gone', delivery: 'push', push_url: 'http://127.0.0.1:9/none' });
    const stale = await node.engine.agents.deliverySettings();
    expect(stale.some((a) => a.name === 'push-gone')).toBe(true);
    await api.deleteAgent('push-gone');
    // A second dispatcher whose pass reads the list from before the delete.
    const engine = Object.create(node.engine, { deliverySettings: { value: async () => stale } });
    const late = new Dispatcher(engine, {});
    try {
      await expect(late.dispatchOnce()).resolves.toBe(0);
    } finally {
      await late.stop();
    }
  });

  it('cancellation aborts the request in flight', async () => {
    const hang = await agentServer(() => {});
    await api.createAgent({ name: 'push-cancel', delivery: 'push', push_url: hang.url, lease_ttl_seconds: 1 });
    const { execution_id } = await api.submit('push-cancel', { message: 'x' });
    await until('the request to arrive', () => hang.seen.length === 1);
    await api.cancel(execution_id);
    const e = await terminal(execution_id);
    expect(e.status).toBe('cancelled');
    await until('the request to be aborted', () => hang.seen[0]!.closedEarly);
  });

  it('a refused connection fails with a clear, non-blank error; push_url is required for push agents', async () => {
    const port = await freePort();
    await api.createAgent({ name: 'push-down', delivery: 'push', push_url: `http://127.0.0.1:${port}/task?token=abc` });
    const { execution_id } = await api.submit('push-down', { message: 'x' });
    const e = await terminal(execution_id);
    expect(e.status).toBe('failed');
    expect(e.error?.code).toBe('push_unreachable');
    expect(e.error?.message).toContain('ECONNREFUSED');
    expect(e.error?.message).not.toContain('token=abc');

    const err = await api.createAgent({ name: 'push-nourl', delivery: 'push' }).catch((x) => x);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(400);
    expect((err as ApiError).message).toContain('push_url');
  });

  it("a failed push's stored error shows its URL redacted, to every reader and to a subscriber's payload", async () => {
    const port = await freePort();
    const token = 'T0kenSegment1234567890abcdef';
    await api.createAgent({ name: 'push-leaky', delivery: 'push', push_url: `http://127.0.0.1:${port}/hooks/${token}/task?sig=qs3cret` });
    await api.createAgent({ name: 'push-leak-reader', max_backlog: 10 });
    await api.createSubscription({
      source_agent: 'push-leaky',
      target_agent: 'push-leak-reader',
      on: 'failed',
      message: 'after {{source.id}}',
    });
    const { execution_id } = await api.submit('push-leaky', { message: 'x' });
    const e = await terminal(execution_id);
    expect(e.error?.code).toBe('push_unreachable');
    // The admin key reads the stored message: the URL is there, its token-like segment is not.
    expect(e.error?.message).toContain(`http://127.0.0.1:${port}/hooks/redacted/task`);
    expect(e.error?.message).not.toContain(token);
    expect(e.error?.message).not.toContain('qs3cret');
    const chained = await until('the subscriber to get its task', async () => {
      const rows = await ts.store.db
        .selectFrom('executions')
        .select(['payload', 'message'])
        .where('agent', '=', 'push-leak-reader')
        .execute();
      return rows[0];
    });
    expect(chained.payload).toContain('push_unreachable');
    expect(chained.payload + chained.message).not.toContain(token);
  });

  it("an error page echoing the push URL's path or query stores it redacted (4xx and 5xx)", async () => {
    const token = 'Ech0edT0kenSegment1234567890';
    const path = `/hooks/${token}/task?sig=qs3cret%2BEcho`;
    // As a web framework's error page does: the request's path and query, no scheme or host.
    const a = await agentServer((_s, res) => {
      res.writeHead(_s.body.message === 'five' ? 503 : 404, { 'content-type': 'text/html' });
      res.end(`<pre>Cannot POST ${path}</pre> (decoded: ${decodeURIComponent(path)})`);
    });
    await api.createAgent({ name: 'push-echo', delivery: 'push', push_url: a.url.replace('/task', path) });
    for (const [message, code] of [
      ['four', 'push_rejected'],
      ['five', 'push_server_error'],
    ]) {
      const { execution_id } = await api.submit('push-echo', { message });
      const e = await terminal(execution_id);
      expect(e.error?.code).toBe(code);
      expect(e.error?.message).toContain('Cannot POST /hooks/redacted/task?sig=redacted');
      expect(e.error?.message).not.toContain(token);
      expect(e.error?.message).not.toContain('qs3cret');
    }
  });
});
