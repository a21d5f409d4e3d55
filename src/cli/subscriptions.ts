import { InvalidArgumentError, type Command } from 'commander';
import type { Subscription, SubscriptionCreate, SubscriptionPatch } from '../client.ts';
import { SUBSCRIPTION_ON } from '../domain/chains.ts';
import { TRIGGER_KINDS } from '../domain/states.ts';
import { json } from './args.ts';
import { keyValues, table } from './output.ts';
import type { CliHelpers } from './globals.ts';

const filterText = (s: Omit<Subscription, 'payload'>) =>
  [s.filter.schedule_id && `schedule=${s.filter.schedule_id}`, s.filter.trigger && `trigger=${s.filter.trigger}`]
    .filter(Boolean)
    .join(' ') || '-';

const subscriptionRow = (s: Omit<Subscription, 'payload'>) => ({
  id: s.id,
  source: s.source_agent,
  target: s.target_agent,
  on: s.on,
  filter: filterText(s),
  enabled: s.enabled ? 'yes' : 'no',
  message: s.message,
});

const oneOf =
  <T extends string>(flag: string, values: readonly T[]) =>
  (v: string): T => {
    if (!(values as readonly string[]).includes(v)) throw new InvalidArgumentError(`${flag} must be one of ${values.join(', ')}`);
    return v as T;
  };

const fieldOptions = (c: Command) =>
  c
    .option('--on <status>', `the final status that starts a task: ${SUBSCRIPTION_ON.join(' | ')}`, oneOf('--on', SUBSCRIPTION_ON))
    .option('--message <template>', 'task message template, e.g. "review {{source.id}}: {{source.result#/title}}"')
    .option('--payload <json>', 'task payload JSON template (default: a summary of the source)', json('--payload'))
    .option('--schedule <id>', "filter: only the source's runs of this schedule")
    .option('--trigger <kind>', `filter: only sources started this way (${TRIGGER_KINDS.join(', ')})`, oneOf('--trigger', TRIGGER_KINDS));

/** The filter the flags give, or undefined when no filter flag was given. */
function filterOf(o: Record<string, any>): SubscriptionCreate['filter'] {
  if (o.schedule === undefined && o.trigger === undefined) return undefined;
  return { ...(o.schedule === undefined ? {} : { schedule_id: o.schedule }), ...(o.trigger === undefined ? {} : { trigger: o.trigger }) };
}

/** `baton subscriptions …`: chains, one agent's outcome starting a task on another (docs/cli.md). */
export function registerSubscriptionCommands(program: Command, h: CliHelpers): void {
  const subs = program
    .command('subscriptions')
    .alias('subs')
    .description("chains: start a task on one agent when another's execution ends");

  fieldOptions(
    subs
      .command('create <source> <target>')
      .description('when an execution of <source> ends --on (default succeeded), start a task on <target>')
      .option('--disabled', 'create it disabled'),
  ).action(async (source, target, _o, cmd) => {
    const o = h.opts(cmd);
    if (!o.message) throw new InvalidArgumentError('--message is required');
    const s = await h.client(o).createSubscription({
      source_agent: source,
      target_agent: target,
      on: o.on ?? 'succeeded',
      filter: filterOf(o),
      message: o.message,
      payload: o.payload,
      enabled: o.disabled ? false : undefined,
    });
    h.print(o, s, () => `created subscription ${s.id}\n` + keyValues(subscriptionRow(s)));
  });
  subs
    .command('list')
    .description('subscriptions, oldest first (message templates as previews: `show` has them whole)')
    .option('--agent <name>', 'only those where this agent is the source or the target')
    .action(async (_o, cmd) => {
      const o = h.opts(cmd);
      const list = await h.client(o).listSubscriptions(o.agent);
      h.print(o, list, () => table(list.map(subscriptionRow), ['id', 'source', 'target', 'on', 'filter', 'enabled', 'message']));
    });
  subs.command('show <id>').action(async (id, _o, cmd) => {
    const o = h.opts(cmd);
    const s = await h.client(o).getSubscription(id);
    h.print(o, s, () => keyValues({ ...subscriptionRow(s), payload: s.payload, created_at: s.created_at, created_by: s.created_by }));
  });
  fieldOptions(
    subs
      .command('update <id>')
      .description('change a subscription (its agents are fixed); a filter flag replaces the whole filter')
      .option('--no-filter', 'remove the filter')
      .option('--enable', 'enable it')
      .option('--disable', 'disable it'),
  ).action(async (id, _o, cmd) => {
    const o = h.opts(cmd);
    if (o.enable && o.disable) throw new InvalidArgumentError('--enable and --disable: give one or the other');
    const patch: SubscriptionPatch = Object.fromEntries(
      Object.entries({
        on: o.on,
        message: o.message,
        payload: o.payload,
        filter: o.filter === false ? null : filterOf(o),
        enabled: o.enable ? true : o.disable ? false : undefined,
      }).filter(([, v]) => v !== undefined),
    );
    const s = await h.client(o).updateSubscription(id, patch);
    h.print(o, s, () => `updated subscription ${s.id}\n` + keyValues(subscriptionRow(s)));
  });
  subs
    .command('delete <id>')
    .description('delete a subscription (tasks it started stay)')
    .action(async (id, _o, cmd) => {
      const o = h.opts(cmd);
      const r = await h.client(o).deleteSubscription(id);
      h.print(o, r, () => `deleted subscription ${id}`);
    });
}
