import { Command, InvalidArgumentError, Option } from 'commander';
import { BatonClient, type Agent, type ExecutionDetail, type ExecutionListItem, type Waiting } from '../client.ts';
import { readEnv } from '../config.ts';
import { EXECUTION_PAGE } from '../domain/lists.ts';
import { isTerminal } from '../domain/states.ts';
import { int, json, num } from './args.ts';
import { connect, missingKeyHint } from './connection.ts';
import { describeError, EXIT } from './exit.ts';
import { formatUsage, registerDeliveryCommands } from './delivery.ts';
import { registerMcpCommands } from './mcp.ts';
import { registerDoctorCommands } from './doctor.ts';
import { registerEventCommands } from './events.ts';
import { registerCanaryCommands } from './canary.ts';
import { registerRetentionCommands } from './retention.ts';
import { registerTriggerCommands } from './triggers.ts';
import { registerSubscriptionCommands } from './subscriptions.ts';
import { registerGroupCommands } from './groups.ts';
import { VERSION } from '../version.ts';
import { duration, keyValues, relativeTime, table } from './output.ts';

interface Globals {
  server?: string;
  key?: string;
  json?: boolean;
  dataDir?: string;
}

/** Server and key from flags, then the environment, then the data directory of a local `baton up`. */
const client = (g: Globals): BatonClient => connect(g);

function print(g: Globals, data: unknown, human: () => string): void {
  process.stdout.write((g.json ? JSON.stringify(data, null, 2) : human()) + '\n');
}

const agentRow = (a: Agent) => ({
  name: a.name,
  delivery: a.delivery,
  running: `${a.running}/${a.max_parallel}`,
  queued: `${a.queued}/${a.max_backlog}`,
  timeout: `${a.timeout_seconds}s`,
  lease: `${a.lease_ttl_seconds}s`,
  paused: a.paused ? `since ${relativeTime(a.paused.since)} by ${a.paused.by}: ${a.paused.reason}` : 'no',
});

/** `agents show`: the circuit breaker in one line. */
function breakerLine(b: Agent['breaker']): string {
  if (!b) return 'off';
  const c = b.config;
  const rule = `opens on ${c.consecutive} in a row or ${c.ratio * 100}% of ${c.window}`;
  if (b.state === 'closed')
    return `closed (${b.consecutive_failures} failures in a row; ${b.recent.failures}/${b.recent.outcomes} recent; ${rule})`;
  if (b.state === 'half_open') return `half-open: probe ${b.probe_execution_id ?? '(next claim)'} decides (${rule})`;
  return `open until ${b.until} (${relativeTime(b.until!)}), then one probe; cool-down ${Math.round((b.cooldown_ms ?? 0) / 1000)} s (${rule})`;
}

/** `baton why`: the waiting answer in words, then its facts. */
export function showWaiting(id: string, status: string, w: Waiting | null): string {
  if (!w) return `${id} is ${status}: it is not waiting.`;
  const lines = [`${id} is queued: ${w.reason}`, w.summary];
  if (w.seats)
    for (const h of w.seats.holders)
      lines.push(
        `  seat: ${h.execution_id} held by ${h.lease_owner ?? '?'} for ${h.running_seconds ?? '?'} s (lease until ${h.lease_expires_at ?? '?'})`,
      );
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

export function buildProgram(): Command {
  const program = new Command('baton')
    .description('Baton: a crash-safe execution control plane for AI agents')
    .version(VERSION)
    .option('--server <url>', 'server URL (env BATON_URL; default http://127.0.0.1:7070)')
    .option('--key <key>', 'API key (env BATON_API_KEY; default: <data dir>/admin.key)')
    .option('--data-dir <dir>', 'data directory (env BATON_DATA_DIR; default ./.baton)')
    .option('--json', 'machine-readable output')
    .showHelpAfterError()
    .exitOverride();

  const g = (cmd: Command) => cmd.optsWithGlobals() as Globals & Record<string, any>;

  program
    .command('up')
    .description('start a Baton server (SQLite in the data dir, or BATON_DATABASE_URL=postgres://…)')
    .option('--port <port>', 'HTTP port (env BATON_PORT; default 7070)', int('port'))
    .option('--host <host>', 'listen address (env BATON_HOST; default 127.0.0.1)')
    .action(async (_o, cmd) => {
      const o = g(cmd);
      const { startNode } = await import('../server/up.ts');
      const node = await startNode({
        env: { ...(o.port ? { port: o.port } : {}), ...(o.host ? { host: o.host } : {}), ...(o.dataDir ? { dataDir: o.dataDir } : {}) },
      });
      // Handlers before anything is printed: whoever sees the key or the banner may stop us at once.
      const stopped = new Promise<void>((resolve) => {
        let signals = 0;
        const onSignal = () => {
          if (++signals > 1) process.exit(130);
          node.stop().then(resolve, resolve);
        };
        process.on('SIGINT', onSignal);
        process.on('SIGTERM', onSignal);
      });
      if (node.createdAdminKey) {
        process.stderr.write(
          `\nAdmin API key (shown once; also saved to ${o.dataDir ?? readEnv().dataDir}/admin.key, mode 0600):\n  ${node.createdAdminKey}\n` +
            (node.replacedKeyFile
              ? `The admin.key there held another key (another store's, started in the same directory): kept as ${node.replacedKeyFile}.\n` +
                'Give each store its own BATON_DATA_DIR to keep their keys apart.\n'
              : '') +
            '\n',
        );
      }
      // For a person at a terminal; in JSON the 'baton is up' line already carries the same facts.
      if (node.logFormat === 'pretty') {
        const { upBanner } = await import('../server/banner.ts');
        process.stdout.write(
          upBanner({ url: node.url, store: node.storeLabel, dataDir: node.dataDir, adminKeyCreated: node.createdAdminKey !== null }),
        );
      }
      await stopped;
    });

  program
    .command('migrate')
    .description('apply pending database migrations and exit')
    .action(async (_o, cmd) => {
      const o = g(cmd);
      const env = readEnv();
      // Loaded only here: database drivers cost most of a CLI start-up.
      const { openStore } = await import('../store/open.ts');
      const store = openStore({ databaseUrl: env.databaseUrl, dataDir: o.dataDir ?? env.dataDir, schema: env.pgSchema });
      try {
        const applied = await store.migrate();
        const status = await store.migrationStatus();
        print(o, { applied, current: status.applied }, () =>
          applied.length ? `applied migrations ${applied.join(', ')}` : `up to date (version ${Math.max(0, ...status.applied)})`,
        );
      } finally {
        await store.close();
      }
    });

  const agents = program.command('agents').description('register and manage agents');
  const agentOptions = (c: Command) =>
    c
      .option('--max-parallel <n>', 'capacity seats', int('--max-parallel'))
      .option('--max-backlog <n>', 'queued executions allowed', int('--max-backlog'))
      .option('--timeout <seconds>', 'hard timeout per run', int('--timeout'))
      .option('--lease-ttl <seconds>', 'lease TTL', int('--lease-ttl'))
      .option('--max-redeliveries <n>', 're-deliveries before poisoned', int('--max-redeliveries'))
      .option('--description <text>', 'free text')
      .option('--delivery <mode>', 'pull (workers claim tasks; default) or push (Baton POSTs them to --push-url)')
      .option('--push-url <url>', 'where push deliveries go')
      .option('--push-secret <secret>', 'HMAC signing secret for push deliveries (stored encrypted, never shown again)')
      .option(
        '--budget-json <json>',
        'spending limits, e.g. \'{"time_zone":"Europe/Berlin","limits":[{"metric":"cost_usd","window":"day","limit":20}]}\' (null: none)',
        json('--budget-json'),
      )
      .option(
        '--breaker-json <json>',
        'circuit breaker, e.g. \'{"consecutive":5,"ratio":0.5,"window":20,"cooldown_ms":30000,"max_cooldown_ms":600000,"count":["agent_error","timeout","poisoned"]}\' (null: off; omitted at creation: the defaults)',
        json('--breaker-json'),
      );
  // Commander stores a parser's `null` as '' (and an empty argument is not JSON, so '' only means null).
  const jsonNull = (v: unknown) => (v === '' ? null : v);
  const settings = (o: Record<string, any>) =>
    Object.fromEntries(
      Object.entries({
        max_parallel: o.maxParallel,
        max_backlog: o.maxBacklog,
        timeout_seconds: o.timeout,
        lease_ttl_seconds: o.leaseTtl,
        max_redeliveries: o.maxRedeliveries,
        description: o.description,
        delivery: o.delivery,
        push_url: o.pushUrl,
        push_secret: o.pushSecret,
        budget: jsonNull(o.budgetJson),
        breaker: jsonNull(o.breakerJson),
      }).filter(([, v]) => v !== undefined),
    );
  agentOptions(agents.command('create <name>').description('register an agent')).action(async (name, _o, cmd) => {
    const o = g(cmd);
    const a = await client(o).createAgent({ name, ...settings(o) });
    print(o, a, () => `created agent ${a.name}\n` + keyValues(agentRow(a)));
  });
  agents
    .command('list')
    .description('agents with running/cap and queue depth')
    .action(async (_o, cmd) => {
      const o = g(cmd);
      const list = await client(o).listAgents();
      // The PAUSED column appears only when some agent is paused: the usual table stays narrow.
      const columns = ['name', 'delivery', 'running', 'queued', 'timeout', 'lease', ...(list.some((a) => a.paused) ? ['paused'] : [])];
      print(o, list, () => table(list.map(agentRow), columns));
    });
  agents
    .command('show <name>')
    .alias('get')
    .action(async (name, _o, cmd) => {
      const o = g(cmd);
      const a = await client(o).getAgent(name);
      print(o, a, () =>
        keyValues({
          ...a,
          paused: a.paused ? `since ${a.paused.since} (${relativeTime(a.paused.since)}) by ${a.paused.by}: ${a.paused.reason}` : 'no',
          lapse_hold: a.lapse_hold
            ? `since ${a.lapse_hold.since} (${relativeTime(a.lapse_hold.since)}): ${a.lapse_hold.lapsed} leases lapsed at once; ends at its workers' next claim or heartbeat`
            : 'no',
          breaker: breakerLine(a.breaker),
          budget: a.budget
            ? `${a.budget.limits.map((l) => `${l.metric} ${l.limit}/${l.window}`).join(', ')}${a.budget.time_zone ? ` (${a.budget.time_zone})` : ''}; see \`baton agents budget ${a.name}\``
            : 'none',
          last_claim_at: a.last_claim_at ? `${a.last_claim_at} (${relativeTime(a.last_claim_at)})` : 'never',
          created_at: `${a.created_at} (${relativeTime(a.created_at)})`,
          updated_at: `${a.updated_at} (${relativeTime(a.updated_at)})`,
        }),
      );
    });
  agentOptions(
    agents.command('update <name>').description('change settings (lowering --max-parallel never interrupts running work)'),
  ).action(async (name, _o, cmd) => {
    const o = g(cmd);
    const a = await client(o).updateAgent(name, settings(o));
    print(o, a, () => `updated agent ${a.name}\n` + keyValues(agentRow(a)));
  });
  agents
    .command('pause <name>')
    .description('stop admitting its work (queued work waits, running work finishes); idempotent')
    .requiredOption('--reason <text>', 'why: shown with the agent and every execution waiting on it')
    .action(async (name, _o, cmd) => {
      const o = g(cmd);
      const a = await client(o).pauseAgent(name, o.reason);
      print(o, a, () => `agent ${a.name} paused since ${a.paused!.since} by ${a.paused!.by}: ${a.paused!.reason}`);
    });
  agents
    .command('resume <name>')
    .description('admit its work again; idempotent')
    .action(async (name, _o, cmd) => {
      const o = g(cmd);
      const a = await client(o).resumeAgent(name);
      print(o, a, () => `agent ${a.name} resumed (${a.queued} queued)`);
    });
  agents
    .command('breaker-close <name>')
    .description('close its circuit breaker by hand: admission resumes at once, failure counts start afresh; idempotent')
    .action(async (name, _o, cmd) => {
      const o = g(cmd);
      const a = await client(o).closeBreaker(name);
      print(o, a, () => `agent ${a.name} circuit breaker ${a.breaker ? a.breaker.state : 'off'} (${a.queued} queued)`);
    });
  agents
    .command('budget <name>')
    .description("its budget: per limit, this window's spending, what remains and when the window resets")
    .action(async (name, _o, cmd) => {
      const o = g(cmd);
      const b = await client(o).agentBudget(name);
      print(o, b, () =>
        b.limits.length === 0
          ? `agent ${name} has no budget`
          : `agent ${name} budget (windows in ${b.time_zone})${b.spent ? ': SPENT, admitting nothing' : ''}\n` +
            table(
              b.limits.map((l) => ({
                metric: l.metric,
                window: l.window,
                limit: l.limit,
                spent: `${l.spent} (${Math.round(l.spent_ratio * 100)} %)`,
                remaining: l.remaining,
                resets: `${l.resets_at} (${relativeTime(l.resets_at)})`,
              })),
              ['metric', 'window', 'limit', 'spent', 'remaining', 'resets'],
            ),
      );
    });
  agents
    .command('delete <name>')
    .description('delete an agent (cancels its queued work; history stays)')
    .action(async (name, _o, cmd) => {
      const o = g(cmd);
      const r = await client(o).deleteAgent(name);
      print(o, r, () => `deleted agent ${name}: ${r.cancelled} queued cancelled, ${r.cancel_requested} running asked to stop`);
    });

  program
    .command('run <agent> <message>')
    .description('submit a task to an agent; prints the execution id')
    .option('--payload <json>', 'JSON payload', json('--payload'))
    .option('--priority <n>', 'lower runs first (default 0)', int('--priority'))
    .option('--delay <seconds>', 'do not start before this many seconds', num('--delay'))
    .option('--wait', 'wait for the outcome; exit 7 if failed, 8 if cancelled')
    .option('--timeout <seconds>', 'with --wait: stop waiting after this long', num('--timeout'))
    .option('--idempotency-key <key>', 'the same key again returns the first answer (docs/triggers.md)')
    .action(async (agent, message, _o, cmd) => {
      const o = g(cmd);
      const c = client(o);
      const created = await c.submit(
        agent,
        { message, payload: o.payload, priority: o.priority, delay_seconds: o.delay },
        { idempotencyKey: o.idempotencyKey },
      );
      if (!o.wait) return print(o, created, () => `${created.execution_id} ${created.status}`);
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
      const o = g(cmd);
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
      const o = g(cmd);
      const e = await client(o).getExecution(id);
      print(o, e, () => showExecution(e));
    });
  program
    .command('why <id>')
    .description('why a queued execution is not running yet, in words (--json: the waiting answer)')
    .action(async (id, _o, cmd) => {
      const o = g(cmd);
      const e = await client(o).getExecution(id);
      print(o, { id: e.id, status: e.status, waiting: e.waiting }, () => showWaiting(e.id, e.status, e.waiting));
    });
  executions
    .command('cancel <id>')
    .description('cancel (queued: at once; running: the worker is told)')
    .action(async (id, _o, cmd) => {
      const o = g(cmd);
      const e = await client(o).cancel(id);
      print(o, e, () => (e.status === 'cancelled' ? `${e.id} cancelled` : `${e.id} cancellation requested (still ${e.status})`));
    });
  executions
    .command('wait <id>')
    .description('wait until the execution ends; exit 7 if failed, 8 if cancelled')
    .option('--timeout <seconds>', 'stop waiting after this long', num('--timeout'))
    .action(async (id, _o, cmd) => {
      const o = g(cmd);
      process.exitCode = await waitAndReport(o, client(o), id, o.timeout);
    });

  const keys = program.command('keys').description('API keys');
  keys
    .command('create <name>')
    .description('create a key: --agent X for a worker key scoped to one agent, --admin for full access')
    .option('--agent <agent>', 'scope the key to this agent (worker protocol only)')
    .option('--admin', 'an admin key')
    .action(async (name, _o, cmd) => {
      const o = g(cmd);
      if (!o.agent === !o.admin) throw new InvalidArgumentError('give exactly one of --agent <name> or --admin');
      const k = await client(o).createKey({ name, scope: o.admin ? 'admin' : 'agent', agent: o.agent });
      print(o, k, () => `created key ${k.id} (${k.scope}${k.agent ? ' for ' + k.agent : ''}); shown once:\n${k.key}`);
    });
  keys.command('list').action(async (_o, cmd) => {
    const o = g(cmd);
    const list = await client(o).listKeys();
    print(o, list, () =>
      table(
        list.map((k) => ({ ...k, created_at: relativeTime(k.created_at), revoked_at: relativeTime(k.revoked_at) })),
        ['id', 'name', 'scope', 'agent', 'created_at', 'revoked_at'],
      ),
    );
  });
  keys.command('revoke <id>').action(async (id, _o, cmd) => {
    const o = g(cmd);
    const k = await client(o).revokeKey(id);
    print(o, k, () => `revoked key ${k.id}`);
  });

  registerMcpCommands(program);
  registerDoctorCommands(program);
  registerEventCommands(program);
  registerDeliveryCommands(program);
  registerCanaryCommands(program);
  registerRetentionCommands(program);
  registerTriggerCommands(program, { client, print, opts: g });
  registerSubscriptionCommands(program, { client, print, opts: g });
  registerGroupCommands(program, { client, print, opts: g });
  return program;
}

export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
    return typeof process.exitCode === 'number' ? process.exitCode : EXIT.ok;
  } catch (err: any) {
    // Thrown by an action (commander printed nothing): say it. One thrown while parsing reaches
    // here as a plain CommanderError, already printed.
    if (err instanceof InvalidArgumentError) {
      process.stderr.write(`error: ${err.message}\n`);
      return EXIT.usage;
    }
    if (err?.code?.startsWith?.('commander.')) {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help') return EXIT.ok;
      return EXIT.usage;
    }
    const { code, line } = describeError(err);
    process.stderr.write(`error: ${line}\n`);
    const hint = code === EXIT.auth ? missingKeyHint() : undefined;
    if (hint) process.stderr.write(`hint: ${hint}\n`);
    return code;
  }
}
