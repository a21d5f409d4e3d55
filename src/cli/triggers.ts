import { InvalidArgumentError, type Command } from 'commander';
import type { Schedule, ScheduleCreate, Webhook } from '../client.ts';
import { int, json } from './args.ts';
import type { CliHelpers } from './globals.ts';
import { keyValues, relativeTime, table } from './output.ts';

const scheduleRow = (s: Omit<Schedule, 'payload' | 'next_runs'>) => ({
  id: s.id,
  agent: s.agent,
  name: s.name,
  cron: s.cron,
  tz: s.timezone,
  enabled: s.enabled ? 'yes' : 'no',
  overlap: s.overlap_policy,
  next: s.next_run_at ? `${s.next_run_at} (${relativeTime(s.next_run_at)})` : '-',
  last: relativeTime(s.last_run_at),
});
const webhookRow = (w: Webhook) => ({
  id: w.id,
  name: w.name,
  agent: w.agent,
  schedule: w.schedule_id ?? '-',
  signed: w.signed ? 'yes' : 'no',
  last_delivery: relativeTime(w.last_delivery_at),
});

function scheduleFields(o: Record<string, any>): Partial<ScheduleCreate> {
  return Object.fromEntries(
    Object.entries({
      name: o.name,
      cron: o.cron,
      timezone: o.tz,
      message: o.message,
      payload: o.payload,
      enabled: o.enabled,
      overlap_policy: o.overlap,
      misfire_policy: o.misfire,
      misfire_grace_seconds: o.misfireGrace,
      retry_policy: o.retry,
      priority: o.priority,
    }).filter(([, v]) => v !== undefined),
  );
}

const scheduleOptions = (c: Command) =>
  c
    .option('--cron <expr>', 'cron: 5 fields, or 6 with seconds first')
    .option('--tz <zone>', 'IANA time zone (default UTC)')
    .option('--message <text>', 'the task each run receives')
    .option('--payload <json>', 'JSON each run receives', json('--payload'))
    .option('--overlap <policy>', 'skip (default) | queue | allow')
    .option('--misfire <policy>', 'run_once (default) | skip')
    .option('--misfire-grace <seconds>', 'catch-up window for run_once (default 3600)', int('--misfire-grace'))
    .option('--retry <json>', 'retry policy, e.g. {"max_attempts":3,"base_seconds":10}', json('--retry'))
    .option('--priority <n>', 'lower runs first (default 0)', int('--priority'));

/** `baton schedules …`, `baton webhooks …` and `baton trigger <schedule>`. */
export function registerTriggerCommands(program: Command, h: CliHelpers): void {
  registerScheduleCommands(program, h);
  registerWebhookCommands(program, h);
}

/** `baton schedules …` and `baton trigger <schedule>`. */
function registerScheduleCommands(program: Command, h: CliHelpers): void {
  const schedules = program.command('schedules').alias('sc').description('cron schedules (docs/triggers.md)');

  scheduleOptions(
    schedules.command('create <agent> <name>').description('create a schedule').option('--disabled', 'create it disabled'),
  ).action(async (agent, name, _o, cmd) => {
    const o = h.opts(cmd);
    if (!o.cron || !o.message) throw new InvalidArgumentError('--cron and --message are required');
    const s = await h
      .client(o)
      .createSchedule(agent, { ...(scheduleFields(o) as ScheduleCreate), name, enabled: o.disabled ? false : undefined });
    h.print(o, s, () => `created schedule ${s.id}\n` + keyValues({ ...scheduleRow(s), next_runs: s.next_runs.join(', ') }));
  });
  schedules
    .command('list [agent]')
    .description('schedules with their next due time')
    .action(async (agent, _o, cmd) => {
      const o = h.opts(cmd);
      const list = await h.client(o).listSchedules(agent);
      h.print(o, list, () => table(list.map(scheduleRow), ['id', 'agent', 'name', 'cron', 'tz', 'enabled', 'overlap', 'next', 'last']));
    });
  schedules.command('show <id>').action(async (id, _o, cmd) => {
    const o = h.opts(cmd);
    const s = await h.client(o).getSchedule(id);
    h.print(o, s, () => keyValues(s));
  });
  scheduleOptions(schedules.command('update <id>').description('change a schedule').option('--name <name>', 'rename')).action(
    async (id, _o, cmd) => {
      const o = h.opts(cmd);
      const s = await h.client(o).updateSchedule(id, scheduleFields(o));
      h.print(o, s, () => `updated schedule ${s.id}\n` + keyValues(scheduleRow(s)));
    },
  );
  for (const [verb, enabled] of [
    ['enable', true],
    ['disable', false],
  ] as const) {
    schedules.command(`${verb} <id>`).action(async (id, _o, cmd) => {
      const o = h.opts(cmd);
      const s = await h.client(o).updateSchedule(id, { enabled });
      h.print(o, s, () => `${verb}d schedule ${s.id}; next run ${s.next_run_at ?? '-'}`);
    });
  }
  schedules
    .command('delete <id>')
    .description('delete (queued runs cancelled, running ones asked to stop; history stays)')
    .action(async (id, _o, cmd) => {
      const o = h.opts(cmd);
      const r = await h.client(o).deleteSchedule(id);
      h.print(o, r, () => `deleted schedule ${id}: ${r.cancelled} queued cancelled, ${r.cancel_requested} running asked to stop`);
    });
  const trigger = async (id: string, _o: unknown, cmd: Command) => {
    const o = h.opts(cmd);
    const r = await h.client(o).triggerSchedule(id, { payload: o.payload, idempotencyKey: o.idempotencyKey });
    h.print(o, r, () => `${r.execution_id} ${r.status}`);
  };
  const triggerOptions = (c: Command) =>
    c
      .description('run a schedule now; prints the execution id (exit 5 and the running id when a run is in flight)')
      .option('--payload <json>', "replaces the schedule's payload for this run", json('--payload'))
      .option('--idempotency-key <key>', 'the same key again returns the first answer');
  triggerOptions(schedules.command('trigger <id>')).action(trigger);
  triggerOptions(program.command('trigger <schedule>')).action(trigger);
}

function registerWebhookCommands(program: Command, h: CliHelpers): void {
  const webhooks = program.command('webhooks').alias('wh').description('webhooks: POST /hooks/<token> starts a run');
  webhooks
    .command('create <name>')
    .description('create a webhook for --schedule or --agent; prints the URL token once')
    .option('--schedule <id>', 'target schedule')
    .option('--agent <name>', 'target agent')
    .option('--message <text>', 'agent target: the task text')
    .option('--overlap <policy>', 'agent target: skip | queue | allow (default)')
    .option('--secret <secret>', 'HMAC signing secret the sender uses (≥ 16 characters)')
    .option('--generate-secret', 'generate a signing secret (shown once)')
    .action(async (name, _o, cmd) => {
      const o = h.opts(cmd);
      const w = await h.client(o).createWebhook({
        name,
        schedule_id: o.schedule,
        agent: o.agent,
        message: o.message,
        overlap_policy: o.overlap,
        secret: o.secret,
        generate_secret: o.generateSecret,
      });
      h.print(
        o,
        w,
        () => `created webhook ${w.id}; shown once:\n  POST ${h.client(o).server}${w.path}${w.secret ? `\n  secret ${w.secret}` : ''}`,
      );
    });
  webhooks
    .command('list')
    .option('--agent <name>')
    .action(async (_o, cmd) => {
      const o = h.opts(cmd);
      const list = await h.client(o).listWebhooks(o.agent);
      h.print(o, list, () => table(list.map(webhookRow), ['id', 'name', 'agent', 'schedule', 'signed', 'last_delivery']));
    });
  webhooks
    .command('show <id>')
    .description('one webhook, its message whole (its token and secret are never shown again)')
    .action(async (id, _o, cmd) => {
      const o = h.opts(cmd);
      const w = await h.client(o).getWebhook(id);
      h.print(o, w, () =>
        keyValues({ ...webhookRow(w), overlap_policy: w.overlap_policy, enabled: w.enabled ? 'yes' : 'no', message: w.message }),
      );
    });
  webhooks
    .command('rotate <id>')
    .description('new token (the old one stops at once); a signed webhook gets a new secret')
    .option('--secret <secret>', 'the new signing secret (default: generated)')
    .action(async (id, _o, cmd) => {
      const o = h.opts(cmd);
      const w = await h.client(o).rotateWebhook(id, o.secret);
      h.print(
        o,
        w,
        () => `rotated webhook ${w.id}; shown once:\n  POST ${h.client(o).server}${w.path}${w.secret ? `\n  secret ${w.secret}` : ''}`,
      );
    });
  webhooks.command('delete <id>').action(async (id, _o, cmd) => {
    const o = h.opts(cmd);
    const r = await h.client(o).deleteWebhook(id);
    h.print(o, r, () => `deleted webhook ${id}`);
  });
}
