/**
 * CLI start-up: how long a `baton` command that only talks HTTP takes from the
 * installed package, end to end — process start, module loading, one request, exit. The package
 * is packed and installed into a fresh project exactly as test/server/package.test.ts does (and shares
 * its cached install), so the figure is what a user of `npm install baton` sees: compiled
 * JavaScript, no tsx. Measures; never asserts. Target: ≤ 250 ms.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { BatonClient } from '../../src/client.ts';
import { packAndInstall } from '../../test/helpers/packages.ts';
import { summarize, type LatencySummary } from './stats.ts';

export const CLI_TARGET_MS = 250;

export interface CliBenchResult {
  scenario: 'cli_startup';
  runs: number;
  /**
   * Wall milliseconds from spawn to exit, per command (one unmeasured warm-up run each first).
   * The floors come first: `node -e ""` (Node's own start) and one bare `fetch` of /healthz
   * (Node's start plus loading its HTTP client, undici): a loaded machine raises them all.
   */
  commands: { command: string; ms: LatencySummary; floor?: true }[];
}

function timeOnce(args: string[], env: Record<string, string>): Promise<number> {
  const t0 = performance.now();
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  return new Promise((resolve, reject) =>
    child.once('close', (code) =>
      code === 0 ? resolve(performance.now() - t0) : reject(new Error(`baton ${args.join(' ')}: exit ${code}: ${err}`)),
    ),
  );
}

export async function runCliBench(
  server: { url: string; key: string },
  opts: { runs?: number; log: (s: string) => void },
): Promise<CliBenchResult> {
  const runs = opts.runs ?? 20;
  opts.log('  packing and installing the package (minutes on the first run: better-sqlite3 compiles) …');
  const { project } = await packAndInstall();
  const bin = join(project, 'node_modules/baton/bin/baton.js');
  const agent = `cli-${Date.now().toString(36)}`;
  await new BatonClient({ server: server.url, key: server.key }).createAgent({ name: agent });
  const env = { BATON_URL: server.url, BATON_API_KEY: server.key };
  const commands: CliBenchResult['commands'] = [];
  const measure = async (args: string[]) => {
    await timeOnce(args, env); // warm the page cache: the first start reads every file from disk
    const sample: number[] = [];
    for (let i = 0; i < runs; i++) sample.push(await timeOnce(args, env));
    return summarize(sample);
  };
  commands.push({ command: 'node -e ""', ms: await measure(['-e', '']), floor: true });
  const bareFetch = "await (await fetch(process.env.BATON_URL + '/healthz')).text()";
  commands.push({ command: `node -e "${bareFetch}"`, ms: await measure(['--input-type=module', '-e', bareFetch]), floor: true });
  for (const args of [['agents', 'list', '--json'], ['--version']])
    commands.push({ command: `baton ${args.join(' ')}`, ms: await measure([bin, ...args]) });
  return { scenario: 'cli_startup', runs, commands };
}
