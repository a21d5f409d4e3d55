/** `baton run`, `baton executions …` and `baton why`: submit a task, read, wait for and cancel executions. */
import { Option, type Command } from 'commander';
import type { BatonClient, ExecutionDetail, ExecutionListItem, Waiting } from '../client.ts';
import { EXECUTION_PAGE } from '../domain/lists.ts';
import { isTerminal } from '../domain/states.ts';
import { int, json, num } from './args.ts';
import { formatUsage } from './delivery.ts';
import { EXIT } from './exit.ts';
import { client, opts, print, type Globals } from './globals.ts';
import { duration, keyValues, relativeTime, table } from './output.ts';

/** `baton why`: the waiting answer in words, then its facts. */
export function showWaiting(id: string, status: string, w: Waiting | null): string {
  if (!w) return `${id} is ${status}: it is not waiting.`;
  const lines = [`${id} is queued: ${w.reason}`, w.summary];
  if (w.seats)
    for (const h of w.seats.holders)
      lines.push(
        `  seat: ${h.execution_id} held by ${h.lease_owner ?? '?'} for ${h.running_seconds ?? '?'} s (lease until ${h.lease_expires_at ?? '?'})`,
      );
  if (w.pool && w.reason === 'pool_full')
    for (const h of w.pool.holders) lines.push(`  pool seat: ${h.execution_id} (agent ${h.agent}) for ${h.running_seconds ?? '?'} s`);
  if (w.pool?.turn && w.reason === 'pool_turn')
    lines.push(`  pool turn: ${w.pool.turn.agent} (waiting since ${w.pool.turn.waiting_since}; ${w.pool.turn.waiting} ahead)`);
  // The summary says how many are ahead, except for serial_busy (describeWaiting); for run_after the queue is not why it waits.
  if (w.reason === 'serial_busy' && w.ahead > 0) lines.push(`Ahead of it: ${w.ahead}${w.ahead_capped ? '+' : ''}.`);
  if (w.backlog_expires_at) lines.push(`Fails as backlog_expired at ${w.backlog_expires_at} if still queued.`);
  return lines.join('\n');
}
const execRow = (e: ExecutionListItem) => ({
  id: e.id,
  agent: e.agent,
  status: e.status,
  attempt: e.attempt,
  trigger: e.trigger,
  created: relativeTime(e.created_at),
  duration: duration(e.duration_ms),
  error: e.error?.code ?? '',
});

function showExecution(e: ExecutionDetail): string {
  const { events, payload, result, waiting, started, ...rest } = e;
  const parts = [keyValues({ ...rest, usage: formatUsage(e.usage), created_at: `${e.created_at} (${relativeTime(e.created_at)})` })];
  if (waiting) parts.push('\nwaiting  ' + waiting.summary);
  parts.push('\npayload  ' + JSON.stringify(payload));
  if (result !== null && result !== undefined) parts.push('result   ' + JSON.stringify(result));
  parts.push('\ntimeline');
  parts.push(
    table(
      events.map((ev) => ({
        at: ev.at,
        from: ev.from ?? '(new)',
        to: ev.to,
        reason: ev.reason ?? '',
        actor: ev.actor,
        attempt: ev.attempt,
      })),
      ['at', 'from', 'to', 'reason', 'actor', 'attempt'],
    ),
  );
  if (started?.length) {
    // What its final outcome started through subscriptions (docs/api.md, "Subscriptions").
    parts.push('\nstarted');
    parts.push(
      table(
        started.map((s) => ({ subscription: s.subscription_id, execution: s.execution_id ?? '-', refused: s.refused ?? '', at: s.at })),
        ['subscription', 'execution', 'refused', 'at'],
      ),
    );
  }
  return parts.join('\n');
}

/** Exit code for a finished execution: scripts can tell failed and cancelled from success. */
function exitFor(status: string): number {
  return status === 'failed' ? EXIT.executionFailed : status === 'cancelled' ? EXIT.executionCancelled : EXIT.ok;
}

async function waitAndReport(g: Globals, c: BatonClient, id: string, timeoutS?: number): Promise<number> {
  const start = Date.now();
  const tty = process.stderr.isTTY && !g.json;
  const e = await c.waitFor(id, {
    timeoutMs: timeoutS === undefined ? undefined : timeoutS * 1000,
    onTick: (x) => {
      if (tty) process.stderr.write(`\r${x.status.padEnd(10)} ${((Date.now() - start) / 1000).toFixed(1)}s `);
    },
  });
  if (tty) process.stderr.write('\n');
  print(g, e, () => showExecution(e));
  if (!isTerminal(e.status)) {
    process.stderr.write(`still ${e.status} after ${timeoutS}s\n`);
    return EXIT.error;
  }
  return exitFor(e.status);
}

export function registerExecutionCommands(program: Command): void {
  program
    .command('run <agent> <message>')
    .description('submit a task to an agent; prints the execution id')
    .option('--payload <json>', 'JSON payload', json('--payload'))
    .option('--priority <n>', 'lower runs first (default 0)', int('--priority'))
    .option('--delay <seconds>', 'do not start before this many seconds', num('--delay'))
    .option('--wait', 'wait for the outcome; exit 7 if failed, 8 if cancelled')
    .option('--timeout <seconds>', 'with --wait: stop waiting after this long', num('--timeout'))
    .option('--idempotency-key <key>', 'the same key again returns the first answer (docs/triggers.md)')
    // Not --key: that global option is the API key.
    .option('--concurrency-key <key>', 'its concurrency key: per-key caps, throttle and fairness (docs/concepts.md)')
    .option(
      '--debounce <seconds>',
      "with --concurrency-key: fold into the key's pending debounced task, or start one after this long",
      int('--debounce'),
    )
    .option('--singleton', 'with --concurrency-key: refuse (exit 5, naming it) while the key has a queued or running task')
    .action(async (agent, message, _o, cmd) => {
      const o = opts(cmd);
      const c = client(o);
      const keyed = { key: o.concurrencyKey, debounce_seconds: o.debounce, singleton: o.singleton };
      const created = await c.submit(
        agent,
        { message, payload: o.payload, priority: o.priority, delay_seconds: o.delay, ...keyed },
        { idempotencyKey: o.idempotencyKey },
      );
      const line = `${created.execution_id} ${created.status}${created.debounced ? ' (debounced)' : ''}`;
      if (!o.wait) return print(o, created, () => line);
      if (!o.json) process.stderr.write(`${created.execution_id} ${created.status}\n`);
      process.exitCode = await waitAndReport(o, c, created.execution_id, o.timeout);
    });

  const executions = program.command('executions').alias('ex').description('list, read and cancel executions');
  executions
    .command('list')
    .option('--agent <name>')
    .addOption(new Option('--status <list>', 'comma-separated statuses'))
    .option(
      '--limit <n>',
      `rows (default ${EXECUTION_PAGE.default}, at most ${EXECUTION_PAGE.max}; --json items carry previews, \`executions show\` the full bodies)`,
      int('--limit'),
    )
    .option('--schedule <id>', 'only runs of this schedule')
    .option('--since <iso>', 'created at or after (ISO-8601)')
    .option('--until <iso>', 'created before (ISO-8601)')
    .option('--cursor <cursor>', 'the next page (printed after a full page)')
    .action(async (_o, cmd) => {
      const o = opts(cmd);
      const page = await client(o).listExecutions({
        agent: o.agent,
        status: o.status,
        limit: o.limit,
        schedule_id: o.schedule,
        since: o.since,
        until: o.until,
        cursor: o.cursor,
      });
      print(o, page, () =>
        table(page.executions.map(execRow), ['id', 'agent', 'status', 'attempt', 'trigger', 'created', 'duration', 'error']),
      );
      if (!o.json && page.next_cursor) process.stderr.write(`more: --cursor ${page.next_cursor}\n`);
    });
  executions
    .command('show <id>')
    .description('one execution with its event timeline')
    .action(async (id, _o, cmd) => {
      const o = opts(cmd);
      const e = await client(o).getExecution(id);
      print(o, e, () => showExecution(e));
    });
  program
    .command('why <id>')
    .description('why a queued execution is not running yet, in words (--json: the waiting answer)')
    .action(async (id, _o, cmd) => {
      const o = opts(cmd);
      const e = await client(o).getExecution(id);
      print(o, { id: e.id, status: e.status, waiting: e.waiting }, () => showWaiting(e.id, e.status, e.waiting));
    });
  executions
    .command('cancel <id>')
    .description('cancel (queued: at once; running: the worker is told)')
    .action(async (id, _o, cmd) => {
      const o = opts(cmd);
      const e = await client(o).cancel(id);
      print(o, e, () => (e.status === 'cancelled' ? `${e.id} cancelled` : `${e.id} cancellation requested (still ${e.status})`));
    });
  executions
    .command('wait <id>')
    .description('wait until the execution ends; exit 7 if failed, 8 if cancelled')
    .option('--timeout <seconds>', 'stop waiting after this long', num('--timeout'))
    .action(async (id, _o, cmd) => {
      const o = opts(cmd);
      process.exitCode = await waitAndReport(o, client(o), id, o.timeout);
    });
}
