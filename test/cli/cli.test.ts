/**
 * The real `baton` command as a child process, against a server started in this process. The
 * children are spawned asynchronously: a synchronous spawn would block the server they talk to.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../../src/cli/exit.ts';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { cliRunner, freePort, SPAWN_TIMEOUT_MS } from '../helpers/process.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { exits } from '../helpers/expect.ts';

let ts: TestStore;
let node: BatonNode;
let admin: string;
let n = 0;

/** Run `baton ...args`. The server and key come from the environment unless `env` overrides them. */
const cli = cliRunner(() => ({ BATON_URL: node.url, BATON_API_KEY: admin, BATON_DATA_DIR: ts.location.dataDir }));
const baton = cli.run;

/** Assert the exit code, showing the output when it is not the one expected. */
const agentName = () => `cli-${++n}`;

/**
 * Generous on purpose: a `baton` process spends ~0.5-1 s of CPU starting (tsx and the module
 * graph), and on a loaded two-core machine ten of them at once can take tens of seconds.
 */

beforeAll(async () => {
  ts = await openTestStore();
  node = await startNode({
    env: ts.nodeEnv,
    logger: false,
    reaper: false,
    nodeId: 'cli-test',
  });
  admin = node.createdAdminKey!;
  expect(admin).toMatch(/^bt_/);
});
afterAll(async () => {
  cli.killAll();
  await node?.stop();
  await ts?.cleanup();
});

/** Claim the next task of `agent` through the engine (waiting for it to be submitted) and finish it. */
async function finishNext(agent: string, status: 'succeeded' | 'failed' | 'cancelled'): Promise<string> {
  const [row] = await node.engine.claim(agent, { owner: 'cli-test-worker', waitMs: SPAWN_TIMEOUT_MS });
  expect(row, `nothing was submitted to ${agent}`).toBeDefined();
  if (status === 'cancelled') await node.engine.cancel(row!.id, 'test');
  await node.engine.complete(
    row!.id,
    row!.lease_token!,
    { status, error: status === 'failed' ? { code: 'boom', message: 'it broke' } : null },
    'test',
  );
  return row!.id;
}

describe(`baton CLI (${STORE_KIND})`, { timeout: 2 * SPAWN_TIMEOUT_MS }, () => {
  it('agents create, list, show, update, delete: tables and --json', async () => {
    const a = agentName();
    const b = agentName();
    const created = exits(
      await baton([
        'agents',
        'create',
        a,
        '--max-parallel',
        '2',
        '--max-backlog',
        '7',
        '--timeout',
        '120',
        '--lease-ttl',
        '15',
        '--description',
        'made by the CLI test',
      ]),
      EXIT.ok,
    );
    expect(created.stdout).toContain(`created agent ${a}`);
    expect(created.stdout).toMatch(/running\s+0\/2/);
    expect(created.stdout).toMatch(/queued\s+0\/7/);
    expect(created.stdout).toMatch(/timeout\s+120s/);
    const createdJson = JSON.parse(exits(await baton(['--json', 'agents', 'create', b]), EXIT.ok).stdout);
    expect(createdJson).toMatchObject({ name: b, max_parallel: 1, delivery: 'pull', running: 0, queued: 0 });

    const [list, listJson, show] = await Promise.all([
      baton(['agents', 'list']),
      baton(['agents', 'list', '--json']),
      baton(['agents', 'show', a]),
    ]);
    const lines = exits(list, EXIT.ok).stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^NAME\s+DELIVERY\s+RUNNING\s+QUEUED\s+TIMEOUT\s+LEASE$/);
    expect(lines.find((l) => l.startsWith(a + ' '))).toMatch(new RegExp(`^${a}\\s+pull\\s+0/2\\s+0/7\\s+120s\\s+15s$`));
    expect(lines.some((l) => l.startsWith(b + ' '))).toBe(true);
    const listed = JSON.parse(exits(listJson, EXIT.ok).stdout);
    expect(listed.map((x: any) => x.name)).toEqual(expect.arrayContaining([a, b]));
    expect(listed.find((x: any) => x.name === a)).toMatchObject({
      name: a,
      max_parallel: 2,
      max_backlog: 7,
      timeout_seconds: 120,
      lease_ttl_seconds: 15,
    });
    expect(exits(show, EXIT.ok).stdout).toMatch(new RegExp(`^name\\s+${a}$`, 'm'));
    expect(show.stdout).toMatch(/^description\s+made by the CLI test$/m);

    const updated = exits(await baton(['agents', 'update', a, '--max-parallel', '3', '--max-redeliveries', '0']), EXIT.ok);
    expect(updated.stdout).toContain(`updated agent ${a}`);
    expect(updated.stdout).toMatch(/running\s+0\/3/);
    expect((await node.engine.agents.get(a)).agent).toMatchObject({ max_parallel: 3, max_redeliveries: 0 });

    await node.engine.submit(b, { message: 'left behind' }, 'test');
    const deleted = exits(await baton(['agents', 'delete', b]), EXIT.ok);
    expect(deleted.stdout.trim()).toBe(`deleted agent ${b}: 1 queued cancelled, 0 running asked to stop`);
    const gone = exits(await baton(['agents', 'show', b]), EXIT.notFound);
    expect(gone.stderr).toMatch(new RegExp(`^error: not_found: agent '${b}' does not exist`));
  });

  it('run prints the execution id; executions list, show and cancel', async () => {
    const a = agentName();
    await node.engine.agents.create({ name: a, max_parallel: 1 }, 'test');
    const [plain, withPayload, asJson] = await Promise.all([
      baton(['run', a, 'first task']),
      baton(['run', a, 'second task', '--payload', '{"doc":42}', '--priority', '-3']),
      baton(['run', a, 'third task', '--json', '--delay', '3600']),
    ]);
    const [id1, status1] = exits(plain, EXIT.ok).stdout.trim().split(' ');
    expect(id1).toMatch(/^ex_[A-Za-z0-9_-]+$/);
    expect(status1).toBe('queued');
    const id2 = exits(withPayload, EXIT.ok).stdout.trim().split(' ')[0]!;
    const created = JSON.parse(exits(asJson, EXIT.ok).stdout);
    expect(created.execution_id).toBe(created.execution.id);
    const id3 = created.execution_id;
    expect(Date.parse(created.execution.run_after)).toBeGreaterThan(Date.now() + 3_000_000);

    const e1 = (await node.engine.getExecution(id1!)).execution;
    expect(e1).toMatchObject({ agent: a, status: 'queued', message: 'first task', trigger_kind: 'cli' });
    const e2 = (await node.engine.getExecution(id2)).execution;
    expect(JSON.parse(e2.payload)).toEqual({ doc: 42 });
    expect(e2.priority).toBe(-3);

    // id2 has the lowest priority number, so it runs first.
    const [running] = await node.engine.claim(a, { owner: 'w' });
    expect(running!.id).toBe(id2);

    const [list, listJson, filtered, show, showJson] = await Promise.all([
      baton(['executions', 'list', '--agent', a]),
      baton(['ex', 'list', '--agent', a, '--json', '--limit', '2']),
      baton(['executions', 'list', '--agent', a, '--status', 'running']),
      baton(['executions', 'show', id2]),
      baton(['--json', 'executions', 'show', id1!]),
    ]);
    const rows = exits(list, EXIT.ok).stdout.trimEnd().split('\n');
    expect(rows[0]).toMatch(/^ID\s+AGENT\s+STATUS\s+ATTEMPT\s+TRIGGER\s+CREATED\s+DURATION\s+ERROR$/);
    expect(
      rows
        .slice(1)
        .map((r) => r.split(/\s+/)[0])
        .sort(),
    ).toEqual([id1, id2, id3].sort());
    expect(rows.find((r) => r.startsWith(id2))).toMatch(new RegExp(`^${id2}\\s+${a}\\s+running\\s+1\\s+cli\\s`));
    const page = JSON.parse(exits(listJson, EXIT.ok).stdout);
    expect(page.executions).toHaveLength(2);
    expect(page.next_cursor).toEqual(expect.any(String));
    expect(
      exits(filtered, EXIT.ok)
        .stdout.trimEnd()
        .split('\n')
        .slice(1)
        .map((r) => r.split(/\s+/)[0]),
    ).toEqual([id2]);
    const shown = exits(show, EXIT.ok).stdout;
    expect(shown).toMatch(new RegExp(`^id\\s+${id2}$`, 'm'));
    expect(shown).toMatch(/^status\s+running$/m);
    expect(shown).toContain('payload  {"doc":42}');
    expect(shown).toMatch(/^timeline$/m);
    expect(shown).toMatch(/\(new\)\s+queued/);
    expect(shown).toMatch(/queued\s+running/);
    const detail = JSON.parse(exits(showJson, EXIT.ok).stdout);
    expect(detail).toMatchObject({ id: id1, status: 'queued', message: 'first task' });
    expect(detail.events.map((e: any) => e.to)).toEqual(['queued']);

    const [cancelQueued, cancelRunning, cancelJson, missing] = await Promise.all([
      baton(['executions', 'cancel', id1!]),
      baton(['executions', 'cancel', id2]),
      baton(['executions', 'cancel', id3, '--json']),
      baton(['executions', 'show', 'ex_doesnotexist']),
    ]);
    expect(exits(cancelQueued, EXIT.ok).stdout.trim()).toBe(`${id1} cancelled`);
    expect(exits(cancelRunning, EXIT.ok).stdout.trim()).toBe(`${id2} cancellation requested (still running)`);
    expect(JSON.parse(exits(cancelJson, EXIT.ok).stdout)).toMatchObject({ id: id3, status: 'cancelled' });
    expect(exits(missing, EXIT.notFound).stderr).toMatch(/^error: not_found: execution 'ex_doesnotexist' does not exist/);
    expect((await node.engine.heartbeat(id2, running!.lease_token!)).cancel_requested).toBe(true);
  });

  it('run --wait exits 0 when the execution succeeds, 7 when it fails, 8 when it is cancelled', async () => {
    const [ok, failed, cancelled] = [agentName(), agentName(), agentName()];
    for (const a of [ok, failed, cancelled]) await node.engine.agents.create({ name: a }, 'test');
    const waits = Promise.all([
      baton(['run', ok, 'will succeed', '--wait']),
      baton(['run', failed, 'will fail', '--wait', '--json']),
      baton(['run', cancelled, 'will be cancelled', '--wait']),
    ]);
    const ids = await Promise.all([finishNext(ok, 'succeeded'), finishNext(failed, 'failed'), finishNext(cancelled, 'cancelled')]);
    const [r0, r7, r8] = await waits;
    expect(exits(r0, EXIT.ok).stderr).toContain(`${ids[0]} queued`);
    expect(r0.stdout).toMatch(/^status\s+succeeded$/m);
    expect(r0.stdout).toMatch(/running\s+succeeded/);
    const failedDetail = JSON.parse(exits(r7, EXIT.executionFailed).stdout);
    expect(failedDetail).toMatchObject({ id: ids[1], status: 'failed', error: { code: 'boom', message: 'it broke' } });
    expect(exits(r8, EXIT.executionCancelled).stdout).toMatch(/^status\s+cancelled$/m);

    // `executions wait` on one already finished answers at once, with the same exit codes.
    const [w0, w7, conflict] = await Promise.all([
      baton(['executions', 'wait', ids[0]!]),
      baton(['executions', 'wait', ids[1]!]),
      baton(['executions', 'cancel', ids[0]!]),
    ]);
    exits(w0, EXIT.ok);
    exits(w7, EXIT.executionFailed);
    // Cancelling a finished execution is a conflict.
    expect(exits(conflict, EXIT.conflict).stderr).toMatch(/invalid_transition/);
  });

  it('exit codes: 3 not found, 4 bad key, 6 backlog full, 9 unreachable, 2 bad usage, 10 conflict', async () => {
    const a = agentName();
    await node.engine.agents.create({ name: a, max_backlog: 1 }, 'test');
    await node.engine.submit(a, { message: 'fills the backlog' }, 'test');
    const workerKey = (await node.keys.create({ name: 'cli-worker', scope: 'agent', agent: a }, 'test')).key;
    const closedPort = await freePort();

    const [noAgent, badKey, scopedKey, full, unreachable, badPayload, badInt, unknownCommand, badName, duplicate, viaFlags] =
      await Promise.all([
        baton(['run', 'no-such-agent', 'hello']),
        baton(['agents', 'list', '--key', `bt_${'0'.repeat(16)}_${'a'.repeat(43)}`]),
        baton(['agents', 'create', agentName()], { BATON_API_KEY: workerKey }),
        baton(['run', a, 'one too many']),
        baton(['agents', 'list'], { BATON_URL: `http://127.0.0.1:${closedPort}` }),
        baton(['run', a, 'hello', '--payload', '{not json']),
        baton(['agents', 'create', agentName(), '--max-parallel', 'lots']),
        baton(['frobnicate']),
        baton(['agents', 'create', 'Not_A_Valid_Name']),
        baton(['agents', 'create', a]),
        baton(['--server', node.url, '--key', admin, 'agents', 'show', a], {
          BATON_URL: `http://127.0.0.1:${closedPort}`,
          BATON_API_KEY: 'not-a-key',
        }),
      ]);
    expect(exits(noAgent, EXIT.notFound).stderr).toContain("agent 'no-such-agent' does not exist");
    expect(exits(badKey, EXIT.auth).stderr).toMatch(/unauthorized/);
    expect(exits(scopedKey, EXIT.auth).stderr).toMatch(/forbidden/);
    expect(exits(full, EXIT.backlogFull).stderr).toMatch(/backlog_full/);
    expect(exits(unreachable, EXIT.unreachable).stderr).toMatch(/cannot reach the Baton server/);
    expect(exits(badPayload, EXIT.usage).stderr).toMatch(/--payload must be valid JSON/);
    expect(exits(badInt, EXIT.usage).stderr).toMatch(/--max-parallel must be an integer/);
    exits(unknownCommand, EXIT.usage);
    expect(exits(badName, EXIT.usage).stderr).toMatch(/validation_error: body\.name/);
    expect(exits(duplicate, EXIT.conflict).stderr).toMatch(/already_exists/);
    expect(exits(viaFlags, EXIT.ok).stdout).toMatch(new RegExp(`^name\\s+${a}$`, 'm'));
    // None of the refusals wrote anything: the backlog still holds the one execution.
    expect(await node.engine.listExecutions({ agent: a })).toHaveLength(1);
  });

  it('keys create, list and revoke; the list never shows a secret', async () => {
    const a = agentName();
    await node.engine.agents.create({ name: a }, 'test');
    const created = JSON.parse(exits(await baton(['keys', 'create', 'ci-worker', '--agent', a, '--json']), EXIT.ok).stdout);
    expect(created).toMatchObject({ name: 'ci-worker', scope: 'agent', agent: a });
    expect(created.key).toMatch(/^bt_/);
    const [list, revoked] = await Promise.all([baton(['keys', 'list']), baton(['keys', 'revoke', created.id])]);
    expect(exits(list, EXIT.ok).stdout).toContain(created.id);
    expect(list.stdout).not.toContain(created.key.slice(-43));
    expect(list.stdout).not.toContain(admin.slice(-43));
    expect(exits(revoked, EXIT.ok).stdout.trim()).toBe(`revoked key ${created.id}`);
    // A revoked key is refused without a hint; no key at all says where the CLI looked.
    expect(exits(await baton(['agents', 'list'], { BATON_API_KEY: created.key }), EXIT.auth).stderr).not.toContain('hint:');
    const elsewhere = `${ts.location.dataDir}/elsewhere`;
    const noKey = exits(await baton(['agents', 'list'], { BATON_API_KEY: undefined, BATON_DATA_DIR: elsewhere }), EXIT.auth);
    expect(noKey.stderr).toContain(`hint: no API key was given: pass --key, set BATON_API_KEY, or run where`);
    expect(noKey.stderr).toContain(`(none in ${elsewhere};`);
    // A scope is required, and said when missing (the action's refusal was once swallowed).
    const [none, both] = await Promise.all([baton(['keys', 'create', 'k']), baton(['keys', 'create', 'k', '--admin', '--agent', a])]);
    for (const r of [none, both]) expect(exits(r, EXIT.usage).stderr).toBe('error: give exactly one of --agent <name> or --admin\n');
  });
});
