/** `baton agents …`: register agents, change their settings, pause and resume them, read budgets, close breakers. */
import type { Command } from 'commander';
import type { Agent } from '../client.ts';
import { collect, int, json, throttleArg } from './args.ts';
import { client, opts, print } from './globals.ts';
import { keyValues, relativeTime, table } from './output.ts';
import { describeThrottle } from '../domain/throttle.ts';

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
    .option('--pool <name>', 'a pool it draws from (repeat, or comma-separated; replaces its pools)', collect)
    .option('--no-pool', 'draw from no pool')
    .option('--throttle <spec>', 'starts per period: LIMIT/PERIOD_SECONDS[+BURST], e.g. 10/60+2; none: remove', throttleArg('--throttle'))
    .option('--key-max-parallel <n>', 'running tasks per concurrency key; none: no cap', (v: string) =>
      v === 'none' ? '' : int('--key-max-parallel')(v),
    )
    .option('--key-overrides-json <json>', 'caps of single keys, e.g. \'{"user:big":5}\' (null: none)', json('--key-overrides-json'))
    .option(
      '--key-throttle <spec>',
      'starts per period for each key: LIMIT/PERIOD_SECONDS[+BURST]; none: remove',
      throttleArg('--key-throttle'),
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
      // Commander: --pool a --pool b is ['a', 'b']; --no-pool is false; neither is undefined.
      pools: o.pool === false ? [] : o.pool,
      throttle: jsonNull(o.throttle),
      key_max_parallel: jsonNull(o.keyMaxParallel),
      key_overrides: jsonNull(o.keyOverridesJson),
      key_throttle: jsonNull(o.keyThrottle),
    }).filter(([, v]) => v !== undefined),
  );

export function registerAgentCommands(program: Command): void {
  const agents = program.command('agents').description('register and manage agents');
  registerAgentSettingsCommands(agents);
  registerAgentControlCommands(agents);
}

/** create, list, show, update. */
function registerAgentSettingsCommands(agents: Command): void {
  agentOptions(agents.command('create <name>').description('register an agent')).action(async (name, _o, cmd) => {
    const o = opts(cmd);
    const a = await client(o).createAgent({ name, ...settings(o) });
    print(o, a, () => `created agent ${a.name}\n` + keyValues(agentRow(a)));
  });
  agents
    .command('list')
    .description('agents with running/cap and queue depth')
    .action(async (_o, cmd) => {
      const o = opts(cmd);
      const list = await client(o).listAgents();
      // The PAUSED column appears only when some agent is paused: the usual table stays narrow.
      const columns = ['name', 'delivery', 'running', 'queued', 'timeout', 'lease', ...(list.some((a) => a.paused) ? ['paused'] : [])];
      print(o, list, () => table(list.map(agentRow), columns));
    });
  agents
    .command('show <name>')
    .alias('get')
    .action(async (name, _o, cmd) => {
      const o = opts(cmd);
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
          pools: a.pools.length > 0 ? `${a.pools.join(', ')}; see \`baton pools show <pool>\`` : 'none',
          throttle: a.throttle ? describeThrottle(a.throttle) : 'none',
          last_claim_at: a.last_claim_at ? `${a.last_claim_at} (${relativeTime(a.last_claim_at)})` : 'never',
          created_at: `${a.created_at} (${relativeTime(a.created_at)})`,
          updated_at: `${a.updated_at} (${relativeTime(a.updated_at)})`,
        }),
      );
    });
  agentOptions(
    agents.command('update <name>').description('change settings (lowering --max-parallel never interrupts running work)'),
  ).action(async (name, _o, cmd) => {
    const o = opts(cmd);
    const a = await client(o).updateAgent(name, settings(o));
    print(o, a, () => `updated agent ${a.name}\n` + keyValues(agentRow(a)));
  });
}

/** pause, resume, breaker-close, budget, delete. */
function registerAgentControlCommands(agents: Command): void {
  agents
    .command('pause <name>')
    .description('stop admitting its work (queued work waits, running work finishes); idempotent')
    .requiredOption('--reason <text>', 'why: shown with the agent and every execution waiting on it')
    .action(async (name, _o, cmd) => {
      const o = opts(cmd);
      const a = await client(o).pauseAgent(name, o.reason);
      print(o, a, () => `agent ${a.name} paused since ${a.paused!.since} by ${a.paused!.by}: ${a.paused!.reason}`);
    });
  agents
    .command('resume <name>')
    .description('admit its work again; idempotent')
    .action(async (name, _o, cmd) => {
      const o = opts(cmd);
      const a = await client(o).resumeAgent(name);
      print(o, a, () => `agent ${a.name} resumed (${a.queued} queued)`);
    });
  agents
    .command('breaker-close <name>')
    .description('close its circuit breaker by hand: admission resumes at once, failure counts start afresh; idempotent')
    .action(async (name, _o, cmd) => {
      const o = opts(cmd);
      const a = await client(o).closeBreaker(name);
      print(o, a, () => `agent ${a.name} circuit breaker ${a.breaker ? a.breaker.state : 'off'} (${a.queued} queued)`);
    });
  agents
    .command('budget <name>')
    .description("its budget: per limit, this window's spending, what remains and when the window resets")
    .action(async (name, _o, cmd) => {
      const o = opts(cmd);
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
    .command('keys <name>')
    .description('its live keys (a queued or running task): seats in use, queue depth, cap, throttle')
    .option('--limit <n>', 'keys (default 100, at most 500)', int('--limit'))
    .option('--cursor <key>', 'the next page (printed after a full page)')
    .action(async (name, _o, cmd) => {
      const o = opts(cmd);
      const page = await client(o).agentKeys(name, { limit: o.limit, cursor: o.cursor });
      print(o, page, () =>
        page.keys.length === 0
          ? `agent ${name} has no live keys`
          : table(
              page.keys.map((k) => ({
                key: k.key,
                running: k.max_parallel === null ? `${k.running}` : `${k.running}/${k.max_parallel}`,
                queued: k.queued,
                throttled: k.throttled_until === null ? '-' : `until ${k.throttled_until}`,
              })),
              ['key', 'running', 'queued', 'throttled'],
            ),
      );
      if (!o.json && page.next_cursor) process.stderr.write(`more: --cursor ${page.next_cursor}\n`);
    });
  agents
    .command('delete <name>')
    .description('delete an agent (cancels its queued work; history stays)')
    .action(async (name, _o, cmd) => {
      const o = opts(cmd);
      const r = await client(o).deleteAgent(name);
      print(o, r, () => `deleted agent ${name}: ${r.cancelled} queued cancelled, ${r.cancel_requested} running asked to stop`);
    });
}
