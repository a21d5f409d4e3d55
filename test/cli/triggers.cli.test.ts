/** `baton schedules|trigger|webhooks` and `--idempotency-key` as real child processes. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../../src/cli/exit.ts';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { cliRunner, SPAWN_TIMEOUT_MS, type CliRun } from '../helpers/process.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let node: BatonNode;
let admin: string;

type Run = CliRun;
/** Run `baton ...args`. The server and key come from the environment unless `env` overrides them. */
const cli = cliRunner(() => ({ BATON_URL: node.url, BATON_API_KEY: admin, BATON_DATA_DIR: ts.location.dataDir }));
const baton = cli.run;
function exits(r: Run, code: number): Run {
  expect(r.code, `exit ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`).toBe(code);
  return r;
}

beforeAll(async () => {
  ts = await openTestStore();
  node = await startNode({
    env: ts.nodeEnv,
    logger: false,
    reaper: false,
    scheduler: false,
    nodeId: 'triggers-cli-test',
  });
  admin = node.createdAdminKey!;
  await node.engine.agents.create({ name: 'cli-sched' }, 'test');
});
afterAll(async () => {
  cli.killAll();
  await node?.stop();
  await ts?.cleanup();
});

describe(`baton schedules, trigger and webhooks (${STORE_KIND})`, { timeout: 8 * SPAWN_TIMEOUT_MS }, () => {
  it('create and list schedules; trigger prints the id, then exits 5 naming the run in flight; --idempotency-key replays', async () => {
    const bad = exits(await baton(['schedules', 'create', 'cli-sched', 'bad', '--cron', '* * *', '--message', 'm']), EXIT.usage);
    expect(bad.stderr).toMatch(/body\.cron/);
    const created = JSON.parse(
      exits(
        await baton([
          '--json',
          'schedules',
          'create',
          'cli-sched',
          'nightly',
          '--cron',
          '0 2 * * *',
          '--tz',
          'Europe/Berlin',
          '--message',
          'report',
          '--payload',
          '{"k":1}',
        ]),
        EXIT.ok,
      ).stdout,
    );
    expect(created).toMatchObject({ agent: 'cli-sched', name: 'nightly', timezone: 'Europe/Berlin', enabled: true, payload: { k: 1 } });
    expect(created.next_runs).toHaveLength(5);
    const list = exits(await baton(['schedules', 'list']), EXIT.ok);
    expect(list.stdout).toContain(created.id);
    expect(list.stdout).toContain('Europe/Berlin');

    const first = exits(await baton(['trigger', created.id, '--idempotency-key', 'once']), EXIT.ok);
    const [id, status] = first.stdout.trim().split(' ');
    expect(status).toBe('queued');
    const replay = exits(await baton(['schedules', 'trigger', created.id, '--idempotency-key', 'once']), EXIT.ok);
    expect(replay.stdout.trim()).toBe(`${id} queued`);
    const busy = exits(await baton(['trigger', created.id]), EXIT.alreadyRunning);
    expect(busy.stderr).toContain(`has a run in flight: execution '${id}'`);
    exits(await baton(['trigger', 'sc_missing']), EXIT.notFound);

    const disabled = JSON.parse(exits(await baton(['--json', 'schedules', 'disable', created.id]), EXIT.ok).stdout);
    expect(disabled).toMatchObject({ enabled: false, next_run_at: null });
    const deleted = exits(await baton(['schedules', 'delete', created.id]), EXIT.ok);
    expect(deleted.stdout).toContain('1 queued cancelled');
  });

  it('run --idempotency-key returns the first answer; webhooks create shows the URL once and list never does', async () => {
    const a = exits(await baton(['run', 'cli-sched', 'hello', '--idempotency-key', 'k1']), EXIT.ok).stdout.trim();
    const b = exits(await baton(['run', 'cli-sched', 'hello', '--idempotency-key', 'k1']), EXIT.ok).stdout.trim();
    expect(b).toBe(a);
    exits(await baton(['run', 'cli-sched', 'other', '--idempotency-key', 'k1']), EXIT.conflict);

    const hook = JSON.parse(
      exits(await baton(['--json', 'webhooks', 'create', 'ci', '--agent', 'cli-sched', '--generate-secret']), EXIT.ok).stdout,
    );
    expect(hook.token).toMatch(/^bwh_/);
    expect(hook.secret).toMatch(/^whsec_/);
    const listed = exits(await baton(['webhooks', 'list']), EXIT.ok);
    expect(listed.stdout).toContain(hook.id);
    expect(listed.stdout).not.toContain(hook.token);
    const rotated = JSON.parse(exits(await baton(['--json', 'webhooks', 'rotate', hook.id]), EXIT.ok).stdout);
    expect(rotated.token).not.toBe(hook.token);
    exits(await baton(['webhooks', 'delete', hook.id]), EXIT.ok);
  });
});
