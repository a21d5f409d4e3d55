import { Command, InvalidArgumentError } from 'commander';
import { commandRunner, resolveCommand } from '../worker/command.ts';
import { createWorker, type WorkerEvent } from '../worker/sdk.ts';
import { connect, resolveConnection, type ConnectionFlags } from './connection.ts';
import { describeError, EXIT } from './exit.ts';

const positive = (name: string, integer: boolean) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || (integer && (!Number.isInteger(n) || n < 1)))
    throw new InvalidArgumentError(`${name} must be a ${integer ? 'positive integer' : 'non-negative number'}`);
  return n;
};

/**
 * `baton worker --agent X -- <command> [args…]`: run a command per task (src/worker/command.ts)
 * on the SDK (src/worker/sdk.ts). `baton logs <id> [-f]`: print or follow an execution's log.
 */
export function registerDeliveryCommands(program: Command): void {
  registerWorkerCommand(program);
  registerLogsCommand(program);
}

function registerWorkerCommand(program: Command): void {
  program
    .command('worker')
    .description('claim tasks of an agent and run <command> once per task (message on stdin, result on stdout)')
    .usage('--agent <name> [options] -- <command> [args…]')
    .requiredOption('--agent <name>', 'the agent whose tasks to run')
    .option('--concurrency <n>', 'tasks run at once', positive('--concurrency', true), 1)
    .option(
      '--kill-grace <seconds>',
      'on cancel/deadline/lost or lapsed lease/shutdown: SIGTERM, then SIGKILL after this long',
      positive('--kill-grace', false),
      5,
    )
    .option(
      '--shutdown-grace <seconds>',
      'on SIGTERM/SIGINT: how long running tasks get to finish before they are stopped and released',
      positive('--shutdown-grace', false),
      30,
    )
    .option('--result-limit <bytes>', 'stdout kept as the result (default 1048576)', positive('--result-limit', true))
    .option('--worker-id <id>', 'lease owner name (default <host>:<pid>)')
    .argument('[command...]', 'the command to run per task, after --')
    .addHelpText(
      'after',
      '\nConnection: the global --server URL and --key KEY (or BATON_URL, BATON_API_KEY).\nExample: baton worker --agent demo --concurrency 2 -- examples/echo-agent.sh',
    )
    .action(runWorkerCommand);
}

/** `baton worker`: claim the agent's tasks and run the command once per task until a signal or a final answer. */
async function runWorkerCommand(command: string[], _o: unknown, cmd: Command): Promise<void> {
  const o = cmd.optsWithGlobals() as ConnectionFlags & Record<string, any>;
  // Usage errors are printed here: commander stays silent about errors thrown from actions.
  const usage = (message: string) => {
    process.stderr.write(`error: ${message}\n`);
    process.exitCode = EXIT.usage;
  };
  if (!command || command.length === 0) return usage('missing command: baton worker --agent <name> -- <command> [args…]');
  try {
    resolveCommand(command[0]!);
  } catch (err) {
    return usage((err as Error).message);
  }
  const { server, key } = resolveConnection(o);
  const runner = commandRunner({
    command: command[0]!,
    args: command.slice(1),
    killGraceMs: o.killGrace * 1000,
    resultLimitBytes: o.resultLimit,
  });
  const say = (line: string) => process.stderr.write(`baton worker: ${line}\n`);
  const outage = new Set<string>();
  const worker = createWorker({
    server,
    key,
    agent: o.agent,
    concurrency: o.concurrency,
    workerId: o.workerId,
    shutdownGraceMs: o.shutdownGrace * 1000,
    // The command gets its SIGTERM→SIGKILL grace; the report waits a little longer than that.
    abortWaitMs: o.killGrace * 1000 + 5_000,
    handler: runner.handler,
    onEvent: (e: WorkerEvent) => {
      if (e.type === 'task:start') say(`${e.executionId} started (attempt ${e.attempt})`);
      else if (e.type === 'task:end')
        say(
          `${e.executionId} ${e.reported === 'completed' ? e.status : e.reported === 'released' ? 'released to the queue' : 'lease lost; not reported'}`,
        );
      else if (e.type === 'task:lapsed')
        say(
          `${e.executionId} lease expired unrenewed (TTL ${e.leaseTtlSeconds} s, server unreachable): stopping the command; not reported`,
        );
      else if (e.type === 'transport:error') {
        // Said once per outage, not once per retry: a restart can take minutes.
        if (!outage.has(e.op)) say(`${e.op}: ${e.error}; retrying with backoff until the server answers`);
        outage.add(e.op);
      } else if (e.type === 'transport:recovered') {
        outage.delete(e.op);
        say(`${e.op}: the server answers again (after ${e.failures} failed attempt${e.failures === 1 ? '' : 's'})`);
      } else say(`${e.op} failed: ${e.error}`);
    },
  });
  let signals = 0;
  let started = false;
  const onSignal = (sig: NodeJS.Signals) => {
    if (++signals > 1) {
      // Second signal: no more grace. Kill every task's process group, then exit.
      runner.killAll();
      say(`${sig} again: killed running commands, exiting now`);
      process.exit(130);
    }
    say(
      started
        ? `${sig}: no new tasks; waiting up to ${o.shutdownGrace} s for ${worker.active} running (signal again to exit at once)`
        : `${sig}: stopping before the first task`,
    );
    worker.stop().catch((err: unknown) => say(`stopping failed: ${err instanceof Error ? err.message : String(err)}`));
  };
  // Handlers first: a worker waiting at start for its server (or database) stops cleanly too.
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    // A final answer (unknown agent, refused key) surfaces here; an unreachable or unavailable
    // server is waited for (said once, above), so a worker may start before its server.
    await worker.start();
    started = true;
  } catch (err) {
    if (!signals) throw err;
  }
  if (started) say(`serving agent '${o.agent}' at ${server}, up to ${o.concurrency} at a time: ${command.join(' ')}`);
  await worker.done;
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  say('stopped');
  // Stopped on its own by a final answer (a revoked key, a deleted agent): exit as a refusal at start would.
  if (worker.failure !== undefined) process.exitCode = describeError(worker.failure).code;
}

function registerLogsCommand(program: Command): void {
  program
    .command('logs <id>')
    .description("print an execution's log lines; -f follows them until the execution ends")
    .option('-f, --follow', 'stream new lines until the execution ends')
    .action(async (id: string, _o, cmd: Command) => {
      const o = cmd.optsWithGlobals() as ConnectionFlags & { follow?: boolean; json?: boolean };
      const client = connect(o);
      const out = (l: { seq: number; at: string; stream: string; line: string }) => {
        if (o.json) process.stdout.write(JSON.stringify(l) + '\n');
        else (l.stream === 'stderr' ? process.stderr : process.stdout).write(l.line + '\n');
      };
      if (o.follow) {
        const abort = new AbortController();
        const stop = () => abort.abort();
        process.once('SIGINT', stop);
        try {
          for await (const item of client.followLogs(id, { signal: abort.signal })) {
            if ('end' in item) {
              if (!o.json) process.stderr.write(`(execution ${item.status})\n`);
              break;
            }
            out(item);
          }
        } catch (err) {
          if ((err as Error)?.name !== 'AbortError') throw err;
        } finally {
          process.off('SIGINT', stop);
        }
        return;
      }
      let after = 0;
      for (;;) {
        const page = await client.getLogs(id, { after, limit: 1000 });
        for (const l of page.lines) out(l);
        if (page.lines.length < 1000) {
          if (page.truncated && !o.json) process.stderr.write('(log truncated at its bounds)\n');
          break;
        }
        after = page.next_after;
      }
    });
}

/** Usage an agent reported, for humans: `1200 in / 350 out tokens, $0.0123` (other fields as JSON). */
export function formatUsage(usage: unknown): string {
  if (usage === null || usage === undefined) return '-';
  if (typeof usage !== 'object') return String(usage);
  const u = usage as Record<string, unknown>;
  const parts: string[] = [];
  const n = (k: string) => (typeof u[k] === 'number' ? (u[k] as number) : undefined);
  const input = n('input_tokens');
  const output = n('output_tokens');
  if (input !== undefined || output !== undefined) parts.push(`${input ?? 0} in / ${output ?? 0} out tokens`);
  else if (n('total_tokens') !== undefined) parts.push(`${n('total_tokens')} tokens`);
  if (n('cost_usd') !== undefined) parts.push(`$${n('cost_usd')!.toFixed(4)}`);
  const rest = Object.fromEntries(
    Object.entries(u).filter(([k]) => !['input_tokens', 'output_tokens', 'total_tokens', 'cost_usd'].includes(k)),
  );
  if (Object.keys(rest).length) parts.push(JSON.stringify(rest));
  return parts.join(', ') || '{}';
}
