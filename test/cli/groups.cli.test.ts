/** `baton groups create|show|list|cancel` as real child processes (exit codes: src/cli/exit.ts). */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../../src/cli/exit.ts';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { cliRunner, SPAWN_TIMEOUT_MS } from '../helpers/process.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { exits } from '../helpers/expect.ts';

let ts: TestStore;
let node: BatonNode;
let admin: string;

const cli = cliRunner(() => ({ BATON_URL: node.url, BATON_API_KEY: admin, BATON_DATA_DIR: ts.location.dataDir }));
const baton = cli.run;
let files = 0;
function spec(body: unknown): string {
  const path = join(ts.location.dataDir, `group-${++files}.json`);
  writeFileSync(path, JSON.stringify(body));
  return path;
}

beforeAll(async () => {
  ts = await openTestStore();
  node = await startNode({ env: ts.nodeEnv, logger: false, reaper: false, scheduler: false, nodeId: 'groups-cli-test' });
  admin = node.createdAdminKey!;
  await node.engine.agents.create({ name: 'cli-worker', max_parallel: 10 }, 'test');
  await node.engine.agents.create({ name: 'cli-join', max_parallel: 10 }, 'test');
});
afterAll(async () => {
  cli.killAll();
  await node?.stop();
  await ts?.cleanup();
});

/** Claim and end every queued task of `agent` in this process (a worker standing in). */
async function work(agent: string, status: 'succeeded' | 'failed' = 'succeeded') {
  for (const row of await node.engine.claim(agent, { owner: 'test', max: 100 })) {
    await node.engine.complete(
      row.id,
      row.lease_token!,
      status === 'failed' ? { status, error: { code: 'boom', message: 'no' } } : { status, result: { ok: true } },
      'test',
    );
  }
}

describe(`baton groups (${STORE_KIND})`, { timeout: 8 * SPAWN_TIMEOUT_MS }, () => {
  it('create, show, list and cancel; a refusal lists every failing item and exits 10', async () => {
    const path = spec({
      members: [
        { agent: 'cli-worker', message: 'a' },
        { agent: 'cli-worker', message: 'b' },
      ],
      join: { agent: 'cli-join', message: 'joined {{group.id}}' },
    });
    const created = JSON.parse(
      exits(await baton(['--json', 'groups', 'create', '-f', path, '--idempotency-key', 'cli-once']), EXIT.ok).stdout,
    );
    expect(created).toMatchObject({ status: 'running', size: 2, join: { agent: 'cli-join' } });
    const replay = JSON.parse(
      exits(await baton(['--json', 'groups', 'create', '-f', path, '--idempotency-key', 'cli-once']), EXIT.ok).stdout,
    );
    expect(replay.id).toBe(created.id);

    const shown = exits(await baton(['groups', 'show', created.id]), EXIT.ok).stdout;
    expect(shown).toContain(created.id);
    expect(shown).toContain(created.members[1].execution_id);
    expect(shown).toMatch(/0\/2 finished/);
    expect(exits(await baton(['groups', 'list']), EXIT.ok).stdout).toContain(created.id);
    exits(await baton(['groups', 'show', 'gr_missing']), EXIT.notFound);

    const cancelled = exits(await baton(['groups', 'cancel', created.id]), EXIT.ok);
    expect(cancelled.stdout).toContain(`cancelled group ${created.id}`);

    const refused = exits(
      await baton([
        'groups',
        'create',
        '-f',
        spec({
          members: [
            { agent: 'cli-worker', message: 'ok' },
            { agent: 'nobody', message: 'x' },
          ],
          join: { agent: 'nobody-either', message: 'x' },
        }),
      ]),
      EXIT.conflict,
    );
    expect(refused.stderr).toMatch(/member 1: agent_not_found/);
    expect(refused.stderr).toMatch(/join: agent_not_found/);
    exits(await baton(['groups', 'create', '-f', join(ts.location.dataDir, 'missing.json')]), EXIT.usage);
  });

  it('--wait waits for the decision and the join, and exits as the join ended; --timeout gives up', async () => {
    const path = spec({ members: [{ agent: 'cli-worker', message: 'w' }], join: { agent: 'cli-join', message: 'joined' } });
    const waiting = baton(['--json', 'groups', 'create', '-f', path, '--wait', '--timeout', '60']);
    // Work arrives while the CLI waits: first the member, then the join.
    for (let i = 0; i < 200 && (await node.engine.listExecutions({ agent: 'cli-worker', status: ['queued'] })).length === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    await work('cli-worker');
    await work('cli-join', 'failed');
    const g = JSON.parse(exits(await waiting, EXIT.executionFailed).stdout);
    expect(g).toMatchObject({ status: 'succeeded', join: { status: 'failed' } });

    const slow = exits(await baton(['groups', 'create', '-f', path, '--wait', '--timeout', '1']), EXIT.error);
    expect(slow.stderr).toMatch(/still running after 1s/);
  });
});
