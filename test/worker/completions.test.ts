import { describe, expect, it } from 'vitest';
import { ApiError, BatonClient, type Task } from '../../src/client.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { createWorker, outcome } from '../../src/worker/sdk.ts';
import { testNodeHooks, until } from '../helpers/delivery.ts';
import { STORE_KIND } from '../helpers/store.ts';

// POST /v1/completions: each item as the single complete route takes and answers it, decided on
// its own; and the worker SDK sending the completions that are ready together as one request.
describe(`batch completions (${STORE_KIND})`, () => {
  let node: BatonNode;
  let api: BatonClient;
  let key: string;
  testNodeHooks((t) => ({ node, api, key } = t));

  const claimed = async (agent: string, n: number): Promise<Task[]> => {
    for (let i = 0; i < n; i++) await api.submit(agent, { message: `t${i}` });
    const tasks = await api.claim(agent, { wait_seconds: 0, max: n });
    expect(tasks).toHaveLength(n);
    return tasks;
  };
  const post = (body: unknown, client = api) =>
    client.request<any>('POST', '/v1/completions', body).then(
      (r) => ({ status: r.status, body: r.body }),
      (e: ApiError) => ({ status: e.status, body: e.body }),
    );
  const status = async (id: string) => (await api.getExecution(id)).status;

  it('answers each item as the single route would, in order: one refusal fails no other', async () => {
    await api.createAgent({ name: 'cm-mixed', max_parallel: 10, max_backlog: 100 });
    const [a, b, c, d] = await claimed('cm-mixed', 4);
    await api.submit('cm-mixed', { message: 'next' });
    const items = [
      { execution_id: a!.execution_id, lease_token: a!.lease_token, status: 'succeeded', result: { n: 1 }, claim: { max: 1 } },
      { execution_id: b!.execution_id, lease_token: 'not-the-token', status: 'succeeded' },
      { execution_id: 'nosuchexecution', lease_token: 'x', status: 'succeeded' },
      { execution_id: c!.execution_id, lease_token: c!.lease_token, status: 'failed', error: { message: 'broke' } },
    ];
    const r = await post({ completions: items });
    expect(r.status).toBe(200);
    expect(r.body.items).toMatchObject([
      {
        index: 0,
        http_status: 200,
        completed: { id: a!.execution_id, status: 'succeeded', result: { n: 1 }, tasks: [{ message: 'next' }] },
      },
      { index: 1, http_status: 409, error: 'lease_lost', execution_id: b!.execution_id },
      { index: 2, http_status: 404, error: 'not_found' },
      { index: 3, http_status: 200, completed: { id: c!.execution_id, status: 'failed', error: { message: 'broke' } } },
    ]);
    expect(await status(b!.execution_id)).toBe('running');
    expect(await status(d!.execution_id)).toBe('running');

    // A batch sent again (its answer lost in transit) answers as the single route does to a
    // repeated completion, and changes nothing.
    const again = await post({ completions: [items[0], items[3]] });
    const single = await api.complete(a!.execution_id, { lease_token: a!.lease_token, status: 'succeeded' }).catch((e: ApiError) => e);
    expect(single).toBeInstanceOf(ApiError);
    expect(again.body.items[0]).toEqual({ index: 0, http_status: (single as ApiError).status, ...(single as ApiError).body });
    expect(again.body.items[1]).toMatchObject({ index: 1, http_status: 409, error: 'lease_lost' });
    expect((await api.getExecution(a!.execution_id)).result).toEqual({ n: 1 });
  });

  it("holds each item to a single completion's size: a result over 4 MiB refuses that item alone (413)", async () => {
    await api.createAgent({ name: 'cm-large', max_parallel: 5, max_backlog: 100 });
    const [a, b] = await claimed('cm-large', 2);
    const big = 'x'.repeat(4 * 1024 * 1024 + 10);
    const kept = { text: 'y'.repeat(300_000) }; // long enough to be stored as sent, unparsed
    const r = await post({
      completions: [
        { execution_id: a!.execution_id, lease_token: a!.lease_token, status: 'succeeded', result: big },
        { execution_id: b!.execution_id, lease_token: b!.lease_token, status: 'succeeded', result: kept },
      ],
    });
    expect(r.status).toBe(200);
    expect(r.body.items).toMatchObject([
      { index: 0, http_status: 413, error: 'payload_too_large', message: expect.stringContaining('body.completions.0.result') },
      { index: 1, http_status: 200, completed: { status: 'succeeded' } },
    ]);
    expect(r.body.items[1].completed.result).toEqual(kept);
    expect(await status(a!.execution_id)).toBe('running');
    expect((await api.getExecution(b!.execution_id)).result).toEqual(kept);
  });

  it('refuses a malformed body as a whole (400 naming the field), writing nothing', async () => {
    await api.createAgent({ name: 'cm-bad', max_parallel: 5, max_backlog: 100 });
    const [a, b] = await claimed('cm-bad', 2);
    const good = { execution_id: a!.execution_id, lease_token: a!.lease_token, status: 'succeeded' };
    const cases: Array<[unknown, string]> = [
      [{ completions: { 0: good } }, 'body.completions'],
      [{ completions: [] }, 'body.completions'],
      [{ completions: Array.from({ length: 101 }, () => good) }, 'body.completions'],
      [
        { completions: [good, { execution_id: b!.execution_id, lease_token: b!.lease_token, status: 'done' }] },
        'body.completions.1.status',
      ],
      [{ completions: [good, { execution_id: b!.execution_id, status: 'succeeded' }] }, 'body.completions.1.lease_token'],
      [{ completions: [good], extra: 1 }, 'body'],
      // A claim that waited would hold every other item's answer back.
      [{ completions: [{ ...good, claim: { max: 1, wait_seconds: 5 } }] }, 'body.completions.0.claim.wait_seconds'],
    ];
    for (const [body, field] of cases) {
      const r = await post(body);
      expect(r.status, JSON.stringify(body).slice(0, 200)).toBe(400);
      expect(r.body).toMatchObject({ error: 'validation_error' });
      expect(r.body.message).toContain(field);
    }
    expect(await status(a!.execution_id)).toBe('running');
    expect(await status(b!.execution_id)).toBe('running');
  });

  it("lets an agent-scoped key complete its own agent's executions only", async () => {
    await api.createAgent({ name: 'cm-mine', max_parallel: 5, max_backlog: 100 });
    await api.createAgent({ name: 'cm-theirs', max_parallel: 5, max_backlog: 100 });
    const [mine] = await claimed('cm-mine', 1);
    const [theirs] = await claimed('cm-theirs', 1);
    const k = await api.createKey({ name: 'cm-worker', scope: 'agent', agent: 'cm-mine' });
    const scoped = new BatonClient({ server: node.url, key: k.key });
    const r = await post(
      {
        completions: [
          { execution_id: theirs!.execution_id, lease_token: theirs!.lease_token, status: 'succeeded' },
          { execution_id: mine!.execution_id, lease_token: mine!.lease_token, status: 'succeeded' },
        ],
      },
      scoped,
    );
    expect(r.status).toBe(200);
    // As the single route answers such a key: another agent's execution does not exist for it.
    const single = await scoped.complete(theirs!.execution_id, { lease_token: theirs!.lease_token, status: 'succeeded' }).catch((e) => e);
    expect(single).toMatchObject({ status: 404, code: 'not_found' });
    expect(r.body.items).toMatchObject([
      { index: 0, http_status: 404, error: 'not_found', message: (single as ApiError).message },
      { index: 1, http_status: 200, completed: { status: 'succeeded' } },
    ]);
    expect(await status(theirs!.execution_id)).toBe('running');
  });

  it('the worker SDK sends a burst of completions in fewer requests than tasks, each task succeeded once', async () => {
    const agent = 'cm-burst';
    const N = 40;
    await api.createAgent({ name: agent, max_parallel: N, max_backlog: 100 });
    const requests = async () => {
      const text = await (await fetch(`${node.url}/metrics`)).text();
      const count = (route: string) =>
        [...text.matchAll(/^baton_http_request_duration_seconds_count\{([^}]*)\} (\d+)/gm)]
          .filter((m) => m[1]!.includes(`route="${route}"`) && m[1]!.includes('method="POST"'))
          .reduce((sum, m) => sum + Number(m[2]), 0);
      return count('/v1/executions/:id/complete') + count('/v1/completions');
    };
    const before = await requests();
    const seen: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const w = createWorker({
      server: node.url,
      key,
      agent,
      concurrency: N,
      claimWaitSeconds: 1,
      async handler(task) {
        seen.push(task.executionId);
        await gate; // every task is held until all have started, then they finish together
        return { done: task.executionId };
      },
    });
    await w.start();
    try {
      const created = await api.submitMany(
        agent,
        Array.from({ length: N }, (_, i) => ({ message: `b${i}` })),
      );
      expect(created.created).toBe(N);
      await until('every task running', () => w.active === N);
      release();
      await until('all succeeded', async () => {
        const rows = await api.listExecutions({ agent, status: 'succeeded', limit: 200 });
        return rows.executions.length === N || undefined;
      });
    } finally {
      release();
      await w.stop();
    }
    // A request is counted once its answer has gone out, a moment after its commit.
    await new Promise((r) => setTimeout(r, 200));
    const sent = (await requests()) - before;
    expect(sent).toBeGreaterThan(0);
    expect(sent).toBeLessThan(N / 2);
    expect(new Set(seen).size).toBe(N);
    expect(seen).toHaveLength(N);
    const rows = (await api.listExecutions({ agent, limit: 200 })).executions;
    expect(rows.every((r) => r.status === 'succeeded' && r.attempt === 1)).toBe(true);
    for (const r of rows) expect((await api.getExecution(r.id)).result).toEqual({ done: r.id });
  });

  it('the worker SDK: an outcome the server refuses fails only its own task, whatever batch it went in', async () => {
    const agent = 'cm-refused';
    const N = 8;
    await api.createAgent({ name: agent, max_parallel: N, max_backlog: 100 });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const w = createWorker({
      server: node.url,
      key,
      agent,
      concurrency: N,
      claimWaitSeconds: 1,
      async handler(task) {
        await gate;
        // Usage that is not a count: the server refuses it (400), and the worker reports the failure instead.
        if (task.message === 'bad') return outcome({ status: 'succeeded', usage: { input_tokens: -1 } });
        return { ok: true };
      },
    });
    await w.start();
    try {
      const created = await api.submitMany(
        agent,
        Array.from({ length: N }, (_, i) => ({ message: i === 3 ? 'bad' : `ok${i}` })),
      );
      await until('every task running', () => w.active === N);
      release();
      await until('all ended', async () => {
        const rows = (await api.listExecutions({ agent, limit: 200 })).executions;
        return rows.every((r) => r.status === 'succeeded' || r.status === 'failed') || undefined;
      });
      const bad = created.items[3] as { execution_id: string };
      const rows = (await api.listExecutions({ agent, limit: 200 })).executions;
      for (const r of rows) expect(r.attempt).toBe(1);
      expect(rows.filter((r) => r.status === 'succeeded')).toHaveLength(N - 1);
      const failed = await api.getExecution(bad.execution_id);
      expect(failed).toMatchObject({ status: 'failed', error: { code: 'invalid_outcome' } });
    } finally {
      release();
      await w.stop();
    }
  });
});
