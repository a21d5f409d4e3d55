/**
 * What every command shares: the global flags (`--server`, `--key`, `--data-dir`, `--json`), how
 * an action reads them, connects with them and prints its answer (JSON with --json, else words).
 */
import type { Command } from 'commander';
import type { BatonClient } from '../client.ts';
import { connect } from './connection.ts';

export interface Globals {
  server?: string;
  key?: string;
  json?: boolean;
  dataDir?: string;
}

/** What the command files that take them are handed: the three functions below. */
export interface CliHelpers {
  client(o: Record<string, any>): BatonClient;
  print(o: Record<string, any>, data: unknown, human: () => string): void;
  opts(cmd: Command): Record<string, any>;
}

/** Server and key from flags, then the environment, then the data directory of a local `baton up`. */
export const client = (g: Globals): BatonClient => connect(g);

export function print(g: Globals, data: unknown, human: () => string): void {
  process.stdout.write((g.json ? JSON.stringify(data, null, 2) : human()) + '\n');
}

/** An action's flags: its own and the global ones. */
export const opts = (cmd: Command) => cmd.optsWithGlobals() as Globals & Record<string, any>;

export const cliHelpers: CliHelpers = { client, print, opts };
