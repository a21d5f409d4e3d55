/** `baton pools …`: limits several agents draw from (seats, a throttle, a budget). */
import type { Command } from 'commander';
import type { Pool } from '../client.ts';
import { describeThrottle } from '../domain/throttle.ts';
import { int, json, throttleArg } from './args.ts';
import { client, opts, print } from './globals.ts';
import { keyValues, relativeTime, table } from './output.ts';

const budgetLine = (b: Pool['budget']) => (b ? b.limits.map((l) => `${l.metric} ${l.limit}/${l.window}`).join(', ') : 'none');
const poolRow = (p: Pool) => ({
  name: p.name,
  seats: p.max_parallel === null ? 'no limit' : String(p.max_parallel),
  throttle: p.throttle ? describeThrottle(p.throttle) : 'none',
  budget: budgetLine(p.budget),
});

// Commander stores a parser's `null` as '' ('' is neither a number nor JSON, so it only means null).
const orNull = (v: unknown) => (v === '' ? null : v);
const poolOptions = (c: Command) =>
  c
    .option('--max-parallel <n>', "seats shared by its agents' running tasks; none: no limit", (v: string) =>
      v === 'none' ? '' : int('--max-parallel')(v),
    )
    .option('--throttle <spec>', 'starts per period: LIMIT/PERIOD_SECONDS[+BURST], e.g. 600/60+20; none: remove', throttleArg('--throttle'))
    .option(
      '--budget-json <json>',
      'usage limits, e.g. \'{"limits":[{"metric":"total_tokens","window":"minute","limit":400000}]}\' (null: none)',
      json('--budget-json'),
    )
    .option('--description <text>', 'free text');
const settings = (o: Record<string, any>) =>
  Object.fromEntries(
    Object.entries({
      max_parallel: orNull(o.maxParallel),
      throttle: orNull(o.throttle),
      budget: orNull(o.budgetJson),
      description: o.description,
    }).filter(([, v]) => v !== undefined),
  );

export function registerPoolCommands(program: Command): void {
  const pools = program.command('pools').description('pools: seats, a throttle and a budget shared by the agents that draw from them');
  poolOptions(
    pools.command('create <name>').description('create a pool (agents draw from it with `baton agents update <agent> --pool <name>`)'),
  ).action(async (name, _o, cmd) => {
    const o = opts(cmd);
    const p = await client(o).createPool({ name, ...settings(o) });
    print(o, p, () => `created pool ${p.name}\n` + keyValues(poolRow(p)));
  });
  pools
    .command('list')
    .description('pools with their limits')
    .action(async (_o, cmd) => {
      const o = opts(cmd);
      const list = await client(o).listPools();
      print(o, list, () => table(list.map(poolRow), ['name', 'seats', 'throttle', 'budget']));
    });
  pools
    .command('show <name>')
    .alias('get')
    .description('a pool and its usage: its agents, seats in use, when its throttle next admits, its budget windows')
    .action(async (name, _o, cmd) => {
      const o = opts(cmd);
      const u = await client(o).getPool(name);
      print(
        o,
        u,
        () =>
          keyValues({
            ...poolRow(u),
            agents: u.agents.length > 0 ? u.agents.join(', ') : 'none',
            in_use: u.max_parallel === null ? String(u.in_use) : `${u.in_use}/${u.max_parallel}`,
            throttle_next_admit_at: u.throttle_next_admit_at
              ? `${u.throttle_next_admit_at} (${relativeTime(u.throttle_next_admit_at)})`
              : '-',
          }) +
          (u.budget_limits.length === 0
            ? ''
            : '\n' +
              table(
                u.budget_limits.map((l) => ({
                  metric: l.metric,
                  window: l.window,
                  limit: l.limit,
                  spent: `${l.spent} (${Math.round(l.spent_ratio * 100)} %)`,
                  resets: `${l.resets_at} (${relativeTime(l.resets_at)})`,
                })),
                ['metric', 'window', 'limit', 'spent', 'resets'],
              )),
      );
    });
  poolOptions(pools.command('update <name>').description("change a pool's limits (lowering seats never stops running work)")).action(
    async (name, _o, cmd) => {
      const o = opts(cmd);
      const p = await client(o).updatePool(name, settings(o));
      print(o, p, () => `updated pool ${p.name}\n` + keyValues(poolRow(p)));
    },
  );
  pools
    .command('delete <name>')
    .description('delete a pool (refused while agents draw from it)')
    .action(async (name, _o, cmd) => {
      const o = opts(cmd);
      const r = await client(o).deletePool(name);
      print(o, r, () => `deleted pool ${name}`);
    });
}
