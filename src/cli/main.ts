import { Command, InvalidArgumentError } from 'commander';
import { missingKeyHint } from './connection.ts';
import { describeError, EXIT } from './exit.ts';
import { registerDeliveryCommands } from './delivery.ts';
import { registerMcpCommands } from './mcp.ts';
import { registerDoctorCommands } from './doctor.ts';
import { registerEventCommands } from './events.ts';
import { registerCanaryCommands } from './canary.ts';
import { registerRetentionCommands } from './retention.ts';
import { registerTriggerCommands } from './triggers.ts';
import { registerSubscriptionCommands } from './subscriptions.ts';
import { registerGroupCommands } from './groups.ts';
import { registerServerCommands } from './server.ts';
import { registerAgentCommands } from './agents.ts';
import { registerPoolCommands } from './pools.ts';
import { registerExecutionCommands } from './executions.ts';
import { registerKeyCommands } from './keys.ts';
import { cliHelpers } from './globals.ts';
import { VERSION } from '../version.ts';

/** The `baton` command: the global flags, then each area's commands (one file each), in help order. */
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

  registerServerCommands(program);
  registerAgentCommands(program);
  registerPoolCommands(program);
  registerExecutionCommands(program);
  registerKeyCommands(program);
  registerMcpCommands(program);
  registerDoctorCommands(program);
  registerEventCommands(program);
  registerDeliveryCommands(program);
  registerCanaryCommands(program);
  registerRetentionCommands(program);
  registerTriggerCommands(program, cliHelpers);
  registerSubscriptionCommands(program, cliHelpers);
  registerGroupCommands(program, cliHelpers);
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
