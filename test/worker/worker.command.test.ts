/**
 * `baton worker -- <command>` as a real OS process against a real server, running real
 * commands: results, failures, process-group killing on cancel / timeout / shutdown (checked in
 * /proc), a SIGKILLed worker's task re-delivered as attempt 2, and clear startup errors.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { BatonClient, LogLine } from '../../src/client.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { groupGone, groupMembers, killGroup, testNodeHooks, until } from '../helpers/delivery.ts';
import { BATON_BIN, freePort, spawnChild, type Child } from '../helpers/process.ts';

let node: BatonNode;
let api: BatonClient;
let key: string;
const children: Child[] = [];
const groups: number[] = [];

testNodeHooks((t) => ({ node, api, key } = t));
afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
  await Promise.all(children.map((c) => c.exited));
  for (const g of groups) killGroup(g);
});

function worker(agent: string, command: string[], flags: string[] = [], env: Record<string, string> = {}): Child {
  const c = spawnChild([BATON_BIN, 'worker', '--agent', agent, ...flags, '--', ...command], {
    BATON_URL: node.url,
    BATON_API_KEY: key,
    BATON_LOG_LEVEL: 'warn',
    ...env,
  });
  children.push(c);
  return c;
}

async function logs(id: string): Promise<LogLine[]> {
  return (await api.getLogs(id)).lines;
}

/** The task's process group: the command prints `pid=$$` first (it leads its own group). */
async function pgidOf(id: string): Promise<number> {
  const line = await until(`pid line of ${id}`, async () => (await logs(id)).find((l) => l.line.startsWith('pid=')));
  const pgid = Number(/^pid=(\d+)/.exec(line.line)![1]);
  groups.push(pgid);
  return pgid;
}

const terminal = (id: string, timeoutMs = 30_000) => api.waitFor(id, { timeoutMs, intervalMs: 100 });

describe('baton worker', () => {
  it('runs the command: message on stdin, BATON_* env, stdout as result, lines as logs', async () => {
    await api.createAgent({ name: 'echo' });
    const w = worker('echo', [
      'sh',
      '-c',
      'cat; echo; echo "attempt=$BATON_ATTEMPT agent=$BATON_AGENT id=$BATON_EXECUTION_ID deadline=$BATON_DEADLINE"; echo "payload=$BATON_PAYLOAD"; if [ -n "$BATON_PAYLOAD_FILE" ]; then echo "file_bytes=$(wc -c < "$BATON_PAYLOAD_FILE")"; fi; echo to-stderr >&2',
    ]);
    const small = await api.submit('echo', { message: 'hi there', payload: { n: 1 } });
    const e = await terminal(small.execution_id);
    expect(e.status, w.output()).toBe('succeeded');
    const result = e.result as string;
    expect(result).toContain('hi there');
    expect(result).toContain(`attempt=1 agent=echo id=${small.execution_id}`);
    expect(result).toContain(`deadline=${e.deadline_at}`);
    expect(result).toContain('payload={"n":1}');
    const lines = await logs(small.execution_id);
    expect(lines.map((l) => l.seq)).toEqual(lines.map((_, i) => i + 1));
    expect(lines.find((l) => l.line === 'to-stderr')?.stream).toBe('stderr');
    expect(lines.filter((l) => l.stream === 'stdout').map((l) => l.line)).toEqual(result.trimEnd().split('\n'));

    // A large payload goes in a file instead of the environment.
    const big = { blob: 'x'.repeat(100_000) };
    const large = await api.submit('echo', { message: 'big', payload: big });
    const e2 = await terminal(large.execution_id);
    expect(e2.status).toBe('succeeded');
    expect(e2.result as string).toContain(`file_bytes=${JSON.stringify(big).length}`);
    expect(e2.result as string).toContain('payload=\n');
    w.proc.kill('SIGTERM');
    expect(await w.exited).toBe(0);
  });

  it('drains a batch with at most one request per task: each completion brings the next task (issue #12)', async () => {
    await api.createAgent({ name: 'batched', max_parallel: 3, max_backlog: 100 });
    const N = 45;
    const created = await api.submitMany(
      'batched',
      Array.from({ length: N }, (_, i) => ({ message: `m${i}` })),
    );
    expect(created.created).toBe(N);
    const requests = async () => {
      const text = await (await fetch(`${node.url}/metrics`)).text();
      const count = (route: string) =>
        [...text.matchAll(/^baton_http_request_duration_seconds_count\{([^}]*)\} (\d+)/gm)]
          .filter((m) => m[1]!.includes(`route="${route}"`) && m[1]!.includes('method="POST"'))
          .reduce((sum, m) => sum + Number(m[2]), 0);
      // Completions that are ready together go as one request (POST /v1/completions).
      return { claims: count('/v1/agents/:agent/claim'), completions: count('/v1/executions/:id/complete') + count('/v1/completions') };
    };
    const before = await requests();
    const w = worker('batched', ['true'], ['--concurrency', '3']);
    await until(
      'the batch drained',
      async () => (await api.listExecutions({ agent: 'batched', status: 'succeeded', limit: 200 })).executions.length === N || undefined,
      60_000,
    );
    // A request is counted when its response has gone out, a moment after its commit: wait for
    // the counts to settle. At most one request per task (fewer when completions went together).
    let after = await requests();
    await until(
      'every completion counted',
      async () => {
        await new Promise((r) => setTimeout(r, 100));
        const now = await requests();
        const settled = now.completions === after.completions;
        after = now;
        return settled || undefined;
      },
      10_000,
    );
    expect(after.completions - before.completions).toBeGreaterThan(0);
    expect(after.completions - before.completions).toBeLessThanOrEqual(N);
    // The first claim, and one after each completion that found nothing queued: far fewer than N.
    expect(after.claims - before.claims, w.output()).toBeLessThan(N / 3);
    const rows = (await api.listExecutions({ agent: 'batched', limit: 200 })).executions;
    expect(rows.every((r) => r.status === 'succeeded' && r.attempt === 1)).toBe(true);
    w.proc.kill('SIGTERM');
    expect(await w.exited).toBe(0);
  });

  it('a non-zero exit fails the execution with the exit code and the last stderr lines', async () => {
    await api.createAgent({ name: 'failing' });
    const w = worker('failing', ['sh', '-c', 'echo partial; echo "first problem" >&2; echo "bad thing happened" >&2; exit 3']);
    const { execution_id } = await api.submit('failing', { message: 'go' });
    const e = await terminal(execution_id);
    expect(e.status, w.output()).toBe('failed');
    expect(e.error?.code).toBe('exit_code');
    expect(e.error?.message).toContain('exited with code 3');
    expect(e.error?.message).toContain('bad thing happened');
    expect(e.result).toBe('partial\n');
    w.proc.kill('SIGTERM');
    expect(await w.exited).toBe(0);
  });

  it('cancel kills the whole process group, grandchildren included', async () => {
    await api.createAgent({ name: 'cancel-me', lease_ttl_seconds: 3 }); // heartbeats every second: the cancel is seen soon
    const w = worker('cancel-me', ['sh', '-c', 'echo pid=$$; sleep 600 & sleep 600'], ['--kill-grace', '2']);
    const { execution_id } = await api.submit('cancel-me', { message: 'go' });
    const pgid = await pgidOf(execution_id);
    await until('sh and both sleeps', () => groupMembers(pgid).length >= 3);
    await api.cancel(execution_id);
    const e = await terminal(execution_id);
    expect(e.status, w.output()).toBe('cancelled');
    expect(await groupGone(pgid)).toEqual([]);
    w.proc.kill('SIGTERM');
    expect(await w.exited).toBe(0);
  });

  it('at the deadline a command that ignores SIGTERM gets SIGKILL; nothing of its group survives', async () => {
    await api.createAgent({ name: 'stubborn', timeout_seconds: 2 });
    const w = worker('stubborn', ['sh', '-c', 'trap "" TERM; echo pid=$$; sleep 600 & sleep 600'], ['--kill-grace', '1']);
    const { execution_id } = await api.submit('stubborn', { message: 'go' });
    const pgid = await pgidOf(execution_id);
    const e = await terminal(execution_id);
    expect(e.status, w.output()).toBe('failed');
    expect(e.error?.code).toBe('timeout');
    expect(await groupGone(pgid)).toEqual([]);
    w.proc.kill('SIGTERM');
    expect(await w.exited).toBe(0);
  });

  it('SIGTERM: stops claiming, waits the grace period, kills the group and releases the task (no attempt charged)', async () => {
    await api.createAgent({ name: 'shutdown' });
    const w = worker('shutdown', ['sh', '-c', 'echo pid=$$; sleep 600 & sleep 600'], ['--shutdown-grace', '1', '--kill-grace', '1']);
    const { execution_id } = await api.submit('shutdown', { message: 'go' });
    const pgid = await pgidOf(execution_id);
    w.proc.kill('SIGTERM');
    expect(await w.exited, w.output()).toBe(0);
    expect(w.output()).toContain('released to the queue');
    expect(await groupGone(pgid)).toEqual([]);
    const e = await api.getExecution(execution_id);
    expect(e.status).toBe('queued');
    expect(e.attempt).toBe(0);
    expect(e.events.at(-1)?.reason).toBe('released');
    await api.cancel(execution_id);
  });

  it('stops on its own when a claim gets a final answer (its agent deleted), exiting as a refusal at start would', async () => {
    await api.createAgent({ name: 'doomed' });
    const w = worker('doomed', ['true']);
    await until('the worker to serve', () => w.output().includes("serving agent 'doomed'"));
    await api.deleteAgent('doomed');
    expect(await w.exited, w.output()).toBe(3); // EXIT.notFound
    expect(w.output()).toMatch(/claim failed: .*doomed.*; the worker stops/);
    expect(w.output()).not.toContain('retrying with backoff');
  });

  it('a second signal exits at once, killing running commands', async () => {
    await api.createAgent({ name: 'impatient' });
    const w = worker(
      'impatient',
      ['sh', '-c', 'trap "" TERM; echo pid=$$; sleep 600 & sleep 600'],
      ['--shutdown-grace', '600', '--kill-grace', '600'],
    );
    const { execution_id } = await api.submit('impatient', { message: 'go' });
    const pgid = await pgidOf(execution_id);
    w.proc.kill('SIGTERM');
    await until('the first signal to be acknowledged', () => w.output().includes('SIGTERM: no new tasks'));
    w.proc.kill('SIGINT');
    expect(await w.exited).toBe(130);
    expect(await groupGone(pgid)).toEqual([]);
    await api.cancel(execution_id);
  });

  it('SIGKILL of the worker mid-task: a second worker receives the same execution as attempt 2', async () => {
    await api.createAgent({ name: 'crash', lease_ttl_seconds: 2 });
    const first = worker('crash', ['sh', '-c', 'echo pid=$$; sleep 600']);
    const { execution_id } = await api.submit('crash', { message: 'survive me' });
    const pgid = await pgidOf(execution_id);
    first.proc.kill('SIGKILL');
    await first.exited;
    // The worker's guardian sees its pipe close and kills the task's group.
    expect(await groupGone(pgid)).toEqual([]);
    const second = worker('crash', ['sh', '-c', 'echo "attempt=$BATON_ATTEMPT id=$BATON_EXECUTION_ID message=$(cat)"']);
    const e = await terminal(execution_id);
    expect(e.status, second.output()).toBe('succeeded');
    expect(e.attempt).toBe(2);
    expect(e.result).toBe(`attempt=2 id=${execution_id} message=survive me\n`);
    expect(e.events.map((ev) => ev.reason)).toContain('requeued');
    second.proc.kill('SIGTERM');
    expect(await second.exited).toBe(0);
  });

  it('baton logs prints the lines (-f ends with the execution); executions show displays usage', async () => {
    await api.createAgent({ name: 'cli-logs' });
    const w = worker('cli-logs', ['sh', '-c', 'echo out-1; echo err-1 >&2; echo out-2']);
    const { execution_id } = await api.submit('cli-logs', { message: 'go' });
    expect((await terminal(execution_id)).status, w.output()).toBe('succeeded');
    await until('three log lines', async () => (await logs(execution_id)).length === 3);
    const cli = async (args: string[]) => {
      const c = spawnChild([BATON_BIN, ...args], { BATON_URL: node.url, BATON_API_KEY: key });
      children.push(c);
      return { code: await c.exited, out: c.output() };
    };
    const plain = await cli(['logs', execution_id]);
    expect(plain.code).toBe(0);
    expect(plain.out).toContain('out-1');
    expect(plain.out).toContain('err-1');
    expect(plain.out).toContain('out-2');
    const followed = await cli(['logs', execution_id, '-f', '--json']);
    expect(followed.code).toBe(0);
    // In order per stream (stdout and stderr are two pipes: their interleaving is not preserved).
    const got = followed.out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as LogLine);
    expect(got.filter((l) => l.stream === 'stdout').map((l) => l.line)).toEqual(['out-1', 'out-2']);
    expect(got.filter((l) => l.stream === 'stderr').map((l) => l.line)).toEqual(['err-1']);
    expect(got.map((l) => l.seq)).toEqual([1, 2, 3]);
    w.proc.kill('SIGTERM');
    expect(await w.exited).toBe(0);

    // Usage an agent reported is shown by `executions show`.
    await api.createAgent({ name: 'cli-usage' });
    const sub = await api.submit('cli-usage', { message: 'go' });
    const [task] = await api.claim('cli-usage', { wait_seconds: 5 });
    await api.complete(task!.execution_id, {
      lease_token: task!.lease_token,
      status: 'succeeded',
      usage: { input_tokens: 1200, output_tokens: 350, cost_usd: 0.0123 },
    });
    const show = await cli(['executions', 'show', sub.execution_id]);
    expect(show.code).toBe(0);
    expect(show.out).toMatch(/usage\s+1200 in \/ 350 out tokens, \$0\.0123/);
  });

  it('clear startup errors: unknown agent, bad key, unreachable server, missing or unknown command', async () => {
    const run = async (args: string[], env: Record<string, string> = {}) => {
      const c = spawnChild([BATON_BIN, 'worker', ...args], { BATON_URL: node.url, BATON_API_KEY: key, ...env });
      children.push(c);
      return { code: await c.exited, out: c.output() };
    };
    const unknown = await run(['--agent', 'nope', '--', 'true']);
    expect(unknown.code).toBe(3);
    expect(unknown.out).toContain("agent 'nope' does not exist");

    const badKey = await run(['--agent', 'echo', '--', 'true'], { BATON_API_KEY: 'bt_0123456789abcdef_' + 'x'.repeat(43) });
    expect(badKey.code).toBe(4);
    expect(badKey.out).toContain('unknown or revoked');

    // An unreachable server is waited for, not fatal: a fleet may start before its server.
    const port = await freePort();
    const waiting = spawnChild([BATON_BIN, 'worker', '--agent', 'echo', '--', 'true'], {
      BATON_URL: `http://127.0.0.1:${port}`,
      BATON_API_KEY: key,
    });
    children.push(waiting);
    await until('the worker says it waits', () => /cannot reach the Baton server.*retrying with backoff/.test(waiting.output()));
    expect(waiting.proc.exitCode).toBe(null);
    waiting.proc.kill('SIGTERM');
    expect(await waiting.exited).toBe(0);
    expect(waiting.output().match(/retrying with backoff/g)).toHaveLength(1); // said once, not per retry

    const missing = await run(['--agent', 'echo']);
    expect(missing.code).toBe(2);
    expect(missing.out).toContain('missing command');

    await api.createAgent({ name: 'pushed', delivery: 'push', push_url: 'http://127.0.0.1:9/task' });
    await api.updateAgent('pushed', { max_parallel: 0 });
    const push = await run(['--agent', 'pushed', '--', 'true']);
    expect(push.code).toBe(1);
    expect(push.out).toContain('uses push delivery');

    const notFound = await run(['--agent', 'echo', '--', 'no-such-command-baton-test']);
    expect(notFound.code).toBe(2);
    expect(notFound.out).toContain("'no-such-command-baton-test' was not found on PATH");
  });
});
