/**
 * Execution logs: fenced appends, order, bounds, redaction; the SDK streaming lines while a task
 * runs, `follow` ending with the task; the SDK's AbortSignal on cancel and on a lost lease.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_FOLLOWERS } from '../../src/api/routes/logs.ts';
import { ApiError, type BatonClient, type LogLine } from '../../src/client.ts';
import { BatonError } from '../../src/domain/errors.ts';
import { appendLogs, readLogs } from '../../src/engine/logs.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { createWorker, outcome, type Task, type TaskAborted } from '../../src/worker/sdk.ts';
import { startTestNode, until } from '../helpers/delivery.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let node: BatonNode;
let api: BatonClient;
let key: string;

beforeAll(async () => {
  ts = await openTestStore();
  ({ node, api, key } = await startTestNode(ts, { dispatcher: false }));
});
afterAll(async () => {
  await node?.stop();
  await ts?.cleanup();
});

/** A deferred: tests release a running handler step by step. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { open, opened };
}

async function claimOne(agent: string) {
  const { engine } = node;
  await engine.submit(agent, { message: 'm' }, 'test');
  const [row] = await engine.claim(agent, { owner: 'test-worker' });
  return row!;
}

describe('log appends (engine)', () => {
  it('are fenced by the lease token, ordered, redacted and bounded with a marker', async () => {
    const { engine } = node;
    await engine.agents.create({ name: 'fenced' }, 'test');
    const row = await claimOne('fenced');
    await expect(appendLogs(engine.store, row.id, 'ls_wrong', [{ stream: 'stdout', line: 'x' }], engine.now())).rejects.toMatchObject({
      code: 'lease_lost',
    });

    const secretLines = [
      'token sk-abcdefghijklmnopqrstuvwx here',
      'gh ghp_abcdefghijklmnopqrstuvwxyz0123',
      'slack xoxb-1234567890-abcdefghij',
      'aws AKIAABCDEFGHIJKLMNOP',
      'baton bt_0123456789abcdef_' + 'A'.repeat(43),
    ];
    await appendLogs(
      engine.store,
      row.id,
      row.lease_token!,
      secretLines.map((line) => ({ stream: 'stdout' as const, line })),
      engine.now(),
    );
    const limits = { maxLines: 8, maxBytes: 1_000_000, maxLineBytes: 100 };
    const r = await appendLogs(
      engine.store,
      row.id,
      row.lease_token!,
      [
        { stream: 'stderr', line: 'y'.repeat(500) },
        { stream: 'stdout', line: 'six' },
        { stream: 'stdout', line: 'seven' },
        { stream: 'stdout', line: 'eight' },
      ],
      engine.now(),
      limits,
    );
    expect(r).toEqual({ accepted: 3, dropped: 2, truncated: true });
    const again = await appendLogs(engine.store, row.id, row.lease_token!, [{ stream: 'stdout', line: 'later' }], engine.now(), limits);
    expect(again).toEqual({ accepted: 0, dropped: 1, truncated: true });

    const page = await readLogs(engine.store, row.id);
    expect(page.truncated).toBe(true);
    expect(page.lines.map((l) => l.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    const text = page.lines.map((l) => l.line).join('\n');
    for (const s of ['sk-abcdefghijklmnop', 'ghp_abcdefghij', 'xoxb-1234567890', 'AKIAABCDEFGHIJKLMNOP', 'bt_0123456789abcdef_AAAA'])
      expect(text).not.toContain(s);
    expect(text).toContain('sk-[redacted]');
    expect(page.lines[5]!.line.length).toBeLessThan(200);
    expect(page.lines[5]!.line).toContain('line cut at 100 bytes');
    expect(page.lines[7]).toMatchObject({ stream: 'system' });
    expect(page.lines[7]!.line).toContain('log truncated');

    // After completion the token no longer writes.
    await engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'test');
    await expect(
      appendLogs(engine.store, row.id, row.lease_token!, [{ stream: 'stdout', line: 'late' }], engine.now()),
    ).rejects.toBeInstanceOf(BatonError);
  });

  it('the HTTP route refuses a stale token with 409 lease_lost and an unknown execution with 404', async () => {
    const { engine } = node;
    await engine.agents.create({ name: 'fenced-http' }, 'test');
    const row = await claimOne('fenced-http');
    await expect(api.appendLogs(row.id, 'ls_stale', [{ line: 'x' }])).rejects.toMatchObject({ status: 409, code: 'lease_lost' });
    await expect(api.appendLogs('ex_doesnotexist', row.lease_token!, [{ line: 'x' }])).rejects.toMatchObject({ status: 404 });
    await expect(api.getLogs('ex_doesnotexist')).rejects.toMatchObject({ status: 404 });
    const ok = await api.appendLogs(row.id, row.lease_token!, [{ line: 'a' }, { stream: 'stderr', line: 'b' }]);
    expect(ok).toEqual({ accepted: 2, dropped: 0, truncated: false });
    await engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'test');
  });
});

describe('SDK and follow', () => {
  it('lines arrive in order while the task runs; follow ends when the task ends', async () => {
    await api.createAgent({ name: 'streamer' });
    const steps = [gate(), gate(), gate()];
    const w = createWorker({
      server: node.url,
      key,
      agent: 'streamer',
      claimWaitSeconds: 1,
      async handler(task: Task) {
        for (let i = 0; i < steps.length; i++) {
          task.log(`line ${i + 1}`, i % 2 ? 'stderr' : 'stdout');
          await steps[i]!.opened;
        }
        return outcome({ status: 'succeeded', result: { done: true }, usage: { input_tokens: 10, output_tokens: 2, cost_usd: 0.001 } });
      },
    });
    await w.start();
    const { execution_id } = await api.submit('streamer', { message: 'stream' });
    const received: LogLine[] = [];
    let ended: string | undefined;
    const follower = (async () => {
      for await (const item of api.followLogs(execution_id)) {
        if ('end' in item) ended = item.status;
        else received.push(item);
      }
    })();
    for (let i = 0; i < steps.length; i++) {
      await until(`line ${i + 1} on the stream`, () => received.length === i + 1);
      // Received while the task still runs: streamed, not dumped at the end.
      expect((await api.getExecution(execution_id)).status).toBe('running');
      expect(ended).toBeUndefined();
      steps[i]!.open();
    }
    await follower;
    expect(ended).toBe('succeeded');
    expect(received.map((l) => [l.seq, l.stream, l.line])).toEqual([
      [1, 'stdout', 'line 1'],
      [2, 'stderr', 'line 2'],
      [3, 'stdout', 'line 3'],
    ]);
    const e = await api.getExecution(execution_id);
    expect(e.usage).toEqual({ input_tokens: 10, output_tokens: 2, cost_usd: 0.001 });
    // Following a finished execution replays its lines and ends at once.
    const replay: unknown[] = [];
    for await (const item of api.followLogs(execution_id)) replay.push(item);
    expect(replay).toHaveLength(4);
    await w.stop();
  });

  it('cancel aborts the task signal with reason "cancelled" and completes it as cancelled', async () => {
    await api.createAgent({ name: 'sdk-cancel', lease_ttl_seconds: 1 });
    let reason: string | undefined;
    const started = gate();
    const w = createWorker({
      server: node.url,
      key,
      agent: 'sdk-cancel',
      claimWaitSeconds: 1,
      handler: (task) =>
        new Promise((_resolve, reject) => {
          started.open();
          task.signal.addEventListener('abort', () => {
            reason = (task.signal.reason as TaskAborted).reason;
            reject(task.signal.reason);
          });
        }),
    });
    await w.start();
    const { execution_id } = await api.submit('sdk-cancel', { message: 'x' });
    await started.opened;
    await api.cancel(execution_id);
    const e = await api.waitFor(execution_id, { timeoutMs: 20_000, intervalMs: 100 });
    expect(e.status).toBe('cancelled');
    expect(reason).toBe('cancelled');
    await w.stop();
  });

  it('a lost lease aborts the task with reason "lease_lost" and the worker reports nothing more', async () => {
    await api.createAgent({ name: 'sdk-lost', lease_ttl_seconds: 1 });
    const events: string[] = [];
    let reason: string | undefined;
    const started = gate();
    const aborted = gate();
    const w = createWorker({
      server: node.url,
      key,
      agent: 'sdk-lost',
      claimWaitSeconds: 1,
      onEvent: (e) => events.push(e.type === 'task:end' ? `end:${e.reported}` : e.type),
      handler: (task) =>
        new Promise((resolve) => {
          started.open();
          task.signal.addEventListener('abort', () => {
            reason = (task.signal.reason as TaskAborted).reason;
            aborted.open();
            resolve('a result that must not land');
          });
        }),
    });
    await w.start();
    const { execution_id } = await api.submit('sdk-lost', { message: 'x' });
    await started.opened;
    // Another owner takes the lease (as a re-claim after a lapse would): the old token is dead.
    await ts.store.db
      .updateTable('executions')
      .set({ lease_token: 'ls_someone_else', lease_owner: 'other' })
      .where('id', '=', execution_id)
      .execute();
    await aborted.opened;
    expect(reason).toBe('lease_lost');
    await until('the task to end', () => events.includes('end:lost'));
    const e = await api.getExecution(execution_id);
    expect(e.status).toBe('running');
    expect(e.result).toBeNull();
    expect(e.lease_owner).toBe('other');
    await w.stop();
    await api.cancel(execution_id);
  });

  it('a handler that throws fails the execution with its message', async () => {
    await api.createAgent({ name: 'sdk-throw' });
    const w = createWorker({
      server: node.url,
      key,
      agent: 'sdk-throw',
      claimWaitSeconds: 1,
      handler: () => Promise.reject(new Error('model refused')),
    });
    await w.start();
    const { execution_id } = await api.submit('sdk-throw', { message: 'x' });
    const e = await api.waitFor(execution_id, { timeoutMs: 20_000, intervalMs: 100 });
    expect(e.status).toBe('failed');
    expect(e.error).toEqual({ code: 'handler_error', message: 'model refused' });
    await w.stop();
  });

  it('an outcome the server refuses is reported as failed/invalid_outcome, not left to lapse', async () => {
    await api.createAgent({ name: 'sdk-invalid' });
    const w = createWorker({
      server: node.url,
      key,
      agent: 'sdk-invalid',
      claimWaitSeconds: 1,
      handler: () => outcome({ status: 'succeeded', usage: { input_tokens: -5 } }),
    });
    await w.start();
    const { execution_id } = await api.submit('sdk-invalid', { message: 'x' });
    const e = await api.waitFor(execution_id, { timeoutMs: 20_000, intervalMs: 100 });
    expect(e.status).toBe('failed');
    expect(e.error?.code).toBe('invalid_outcome');
    expect(e.error?.message).toContain('usage');
    await w.stop();
  });

  it('recognisable secrets in a result or error message are redacted before they are stored', async () => {
    await api.createAgent({ name: 'sdk-secret' });
    const w = createWorker({
      server: node.url,
      key,
      agent: 'sdk-secret',
      claimWaitSeconds: 1,
      handler: (task) =>
        task.message === 'ok'
          ? { token: 'use sk-abcdefghijklmnopqrstuvwx please', list: ['ghp_abcdefghijklmnopqrstuvwxyz0123'] }
          : Promise.reject(new Error('login failed for AKIAABCDEFGHIJKLMNOP')),
    });
    await w.start();
    const ok = await api.submit('sdk-secret', { message: 'ok' });
    const bad = await api.submit('sdk-secret', { message: 'bad' });
    const e1 = await api.waitFor(ok.execution_id, { timeoutMs: 20_000, intervalMs: 100 });
    const e2 = await api.waitFor(bad.execution_id, { timeoutMs: 20_000, intervalMs: 100 });
    expect(e1.result).toEqual({ token: 'use sk-[redacted] please', list: ['ghp_[redacted]'] });
    expect(e2.error?.message).toBe('login failed for AKIA[redacted]');
    await w.stop();
  });

  it('start() refuses an unknown agent and a bad key', async () => {
    const h = () => null;
    await expect(createWorker({ server: node.url, key, agent: 'nope', handler: h }).start()).rejects.toMatchObject({ status: 404 });
    await expect(
      createWorker({ server: node.url, key: 'bt_0123456789abcdef_' + 'x'.repeat(43), agent: 'sdk-throw', handler: h }).start(),
    ).rejects.toBeInstanceOf(ApiError);
  });
});

describe('many followers of one execution', () => {
  it('share the reads of an append, and each still gets every line in order', async () => {
    // Every follower used to read every page itself: 250 followers of a 4 MB append held a SQLite server's event loop ~4.5 s.
    const { engine } = node;
    await engine.agents.create({ name: 'crowd' }, 'test');
    const row = await claimOne('crowd');
    const FOLLOWERS = 8;
    const LINES = 300; // 5 pages of 64
    const ctl = new AbortController();
    const received: number[][] = Array.from({ length: FOLLOWERS }, () => []);
    const followers = received.map(async (seqs) => {
      for await (const item of api.followLogs(row.id, { signal: ctl.signal })) if (!('end' in item)) seqs.push(item.seq);
    });
    await engine.logs.append(row.id, row.lease_token!, [{ stream: 'stdout', line: 'first' }]);
    await until('every follower has the first line', () => received.every((s) => s.length === 1));
    let reads = 0;
    const read = engine.logs.read.bind(engine.logs);
    engine.logs.read = (id, o) => {
      if (id === row.id) reads++;
      return read(id, o);
    };
    try {
      const lines = Array.from({ length: LINES }, (_, i) => ({ stream: 'stdout' as const, line: `${i + 2} ${'z'.repeat(2000)}` }));
      await engine.logs.append(row.id, row.lease_token!, lines);
      await until('every follower has every line', () => received.every((s) => s.length === LINES + 1));
    } finally {
      engine.logs.read = read;
    }
    for (const seqs of received) expect(seqs).toEqual(Array.from({ length: LINES + 1 }, (_, i) => i + 1));
    expect(reads, `page reads for ${FOLLOWERS} followers of 5 pages`).toBeLessThan((FOLLOWERS * 5) / 2);
    await engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'test');
    await Promise.all(followers);
    ctl.abort();
  });

  it(`answers a follower past ${MAX_FOLLOWERS} on one execution 429 too_many_streams, and takes one again once a follower left`, async () => {
    const { engine } = node;
    await engine.agents.create({ name: 'capped' }, 'test');
    const row = await claimOne('capped');
    const url = `${node.url}/v1/executions/${row.id}/logs?follow=true`;
    const headers = { authorization: `Bearer ${key}` };
    const open = Array.from({ length: MAX_FOLLOWERS }, () => new AbortController());
    try {
      for (const ctl of open) expect((await fetch(url, { headers, signal: ctl.signal })).status).toBe(200);
      const refused = await fetch(url, { headers });
      expect(refused.status).toBe(429);
      expect(await refused.json()).toEqual({
        error: 'too_many_streams',
        message: expect.stringContaining(`${MAX_FOLLOWERS} log-follow streams`),
        execution_id: row.id,
        limit: MAX_FOLLOWERS,
      });
      // Pages are still served, and another execution is not affected.
      expect((await fetch(`${node.url}/v1/executions/${row.id}/logs`, { headers })).status).toBe(200);
      open.pop()!.abort();
      const again = new AbortController();
      open.push(again);
      await until('a follower is taken again', async () => {
        const r = await fetch(url, { headers, signal: again.signal });
        if (r.status !== 200) await r.body?.cancel();
        return r.status === 200;
      });
    } finally {
      for (const ctl of open) ctl.abort();
    }
    await engine.cancel(row.id, 'test');
  });
});
