/** `baton keys …`: create, list and revoke API keys. */
import { InvalidArgumentError, type Command } from 'commander';
import { client, opts, print } from './globals.ts';
import { relativeTime, table } from './output.ts';

export function registerKeyCommands(program: Command): void {
  const keys = program.command('keys').description('API keys');
  keys
    .command('create <name>')
    .description('create a key: --agent X for a worker key scoped to one agent, --admin for full access')
    .option('--agent <agent>', 'scope the key to this agent (worker protocol only)')
    .option('--admin', 'an admin key')
    .action(async (name, _o, cmd) => {
      const o = opts(cmd);
      if (!o.agent === !o.admin) throw new InvalidArgumentError('give exactly one of --agent <name> or --admin');
      const k = await client(o).createKey({ name, scope: o.admin ? 'admin' : 'agent', agent: o.agent });
      print(o, k, () => `created key ${k.id} (${k.scope}${k.agent ? ' for ' + k.agent : ''}); shown once:\n${k.key}`);
    });
  keys.command('list').action(async (_o, cmd) => {
    const o = opts(cmd);
    const list = await client(o).listKeys();
    print(o, list, () =>
      table(
        list.map((k) => ({ ...k, created_at: relativeTime(k.created_at), revoked_at: relativeTime(k.revoked_at) })),
        ['id', 'name', 'scope', 'agent', 'created_at', 'revoked_at'],
      ),
    );
  });
  keys.command('revoke <id>').action(async (id, _o, cmd) => {
    const o = opts(cmd);
    const k = await client(o).revokeKey(id);
    print(o, k, () => `revoked key ${k.id}`);
  });
}
