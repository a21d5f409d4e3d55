/** `baton subscriptions create|list|show|update|delete` as real child processes. */
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
beforeAll(async () => {
  ts = await openTestStore();
  node = await startNode({ env: ts.nodeEnv, logger: false, reaper: false, scheduler: false, nodeId: 'subscriptions-cli-test' });
  admin = node.createdAdminKey!;
  await node.engine.agents.create({ name: 'cli-coder' }, 'test');
  await node.engine.agents.create({ name: 'cli-reviewer' }, 'test');
});
afterAll(async () => {
  cli.killAll();
  await node?.stop();
  await ts?.cleanup();
});

describe(`baton subscriptions (${STORE_KIND})`, { timeout: 10 * SPAWN_TIMEOUT_MS }, () => {
  it('create, list, show, update, delete; refusals exit with their codes naming the field', async () => {
    const created = JSON.parse(
      exits(
        await baton([
          '--json',
          'subscriptions',
          'create',
          'cli-coder',
          'cli-reviewer',
          '--on',
          'failed',
          '--trigger',
          'api',
          '--message',
          'triage {{source.id}}: {{source.error.message}}',
          '--payload',
          '{"source":"{{source.id}}"}',
        ]),
        EXIT.ok,
      ).stdout,
    );
    expect(created).toMatchObject({
      source_agent: 'cli-coder',
      target_agent: 'cli-reviewer',
      on: 'failed',
      filter: { trigger: 'api' },
      payload: { source: '{{source.id}}' },
      enabled: true,
    });
    const list = exits(await baton(['subscriptions', 'list', '--agent', 'cli-reviewer']), EXIT.ok);
    expect(list.stdout).toContain(created.id);
    expect(list.stdout).toContain('trigger=api');
    const shown = exits(await baton(['subscriptions', 'show', created.id]), EXIT.ok);
    expect(shown.stdout).toMatch(/on\s+failed/);

    // A failed source (trigger api) starts the task; `executions show` lists it under `started`.
    const src = await node.engine.submit('cli-coder', { message: 'code' }, 'test');
    const [row] = await node.engine.claim('cli-coder', { owner: 'cli-test' });
    await node.engine.complete(row!.id, row!.lease_token!, { status: 'failed', error: { code: 'boom', message: 'no' } }, 'cli-test');
    const show = exits(await baton(['executions', 'show', src.id]), EXIT.ok);
    expect(show.stdout).toMatch(new RegExp(`started\\nSUBSCRIPTION.*\\n${created.id}\\s+ex_`));
    const updated = JSON.parse(
      exits(await baton(['--json', 'subscriptions', 'update', created.id, '--on', 'any', '--no-filter', '--disable']), EXIT.ok).stdout,
    );
    expect(updated).toMatchObject({ on: 'any', filter: {}, enabled: false });

    const badTemplate = exits(
      await baton(['subscriptions', 'create', 'cli-coder', 'cli-reviewer', '--message', '{{source.nope}}']),
      EXIT.usage,
    );
    expect(badTemplate.stderr).toMatch(/validation_error: body\.message: placeholder \{\{source\.nope\}\}/);
    const badOn = exits(
      await baton(['subscriptions', 'create', 'cli-coder', 'cli-reviewer', '--on', 'done', '--message', 'm']),
      EXIT.usage,
    );
    expect(badOn.stderr).toMatch(/--on must be one of succeeded, failed, cancelled, any/);
    const noAgent = exits(await baton(['subscriptions', 'create', 'cli-coder', 'nobody', '--message', 'm']), EXIT.notFound);
    expect(noAgent.stderr).toMatch(/agent 'nobody'/);

    expect(exits(await baton(['subscriptions', 'delete', created.id]), EXIT.ok).stdout).toContain(`deleted subscription ${created.id}`);
    exits(await baton(['subscriptions', 'show', created.id]), EXIT.notFound);
    expect(exits(await baton(['--json', 'subscriptions', 'list']), EXIT.ok).stdout.trim()).toBe('[]');
  });
});
