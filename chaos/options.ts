/** The chaos run's command line, its seeded randomness, and the small helpers every phase uses. */
import { createServer } from 'node:net';
import { NET_CUT_TTL_S } from './net-cut.ts';

export interface Options {
  mode: 'quick' | 'full' | 'custom';
  tasks: number;
  kills: number;
  leaseTtl: number;
  concurrency: number;
  pgRestart: boolean;
  pgRestartCmd: string;
  /** --pg-failover: a cluster of its own, primary and standby, and the primary killed halfway (chaos/failover.ts). */
  pgFailover: boolean;
  /** --pg-failover-async: the same with asynchronous replication; acknowledged writes lost are reported, not failed. */
  pgFailoverAsync: boolean;
  clockSkew: boolean;
  /** Cuts of the network between some workers and the servers (chaos/net-cut.ts); 0: off. */
  netCuts: number;
  keep: boolean;
  databaseUrl: string;
  seed: number;
}

export function parse(argv: string[]): Options {
  const o: Options = {
    mode: 'full',
    tasks: 10_000,
    kills: 20,
    leaseTtl: 10,
    concurrency: 12,
    pgRestart: false,
    // The machine's cluster, whatever its version (as .ci/run starts it).
    pgRestartCmd:
      process.env.BATON_CHAOS_PG_RESTART_CMD ?? 'pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main restart',
    pgFailover: false,
    pgFailoverAsync: false,
    clockSkew: false,
    netCuts: 0,
    keep: false,
    databaseUrl: process.env.BATON_CHAOS_DATABASE_URL ?? process.env.BATON_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
    seed: Number(process.env.BATON_CHAOS_SEED ?? Date.now() % 1_000_000),
  };
  let custom = false;
  let netCut = false;
  let ttlGiven = false;
  let cutsGiven = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const val = () => {
      const v = Number(argv[++i]);
      if (!Number.isFinite(v) || v < 0) throw new Error(`${a} needs a number`);
      custom = true;
      return v;
    };
    if (a === '--quick') Object.assign(o, { mode: 'quick', tasks: 1_000, kills: 6 });
    else if (a === '--tasks') o.tasks = val();
    else if (a === '--kills') o.kills = val();
    else if (a === '--lease-ttl') ((o.leaseTtl = val()), (ttlGiven = true));
    else if (a === '--concurrency') o.concurrency = val();
    else if (a === '--seed') o.seed = val();
    else if (a === '--pg-restart') o.pgRestart = true;
    else if (a === '--pg-failover') o.pgFailover = true;
    else if (a === '--pg-failover-async') Object.assign(o, { pgFailover: true, pgFailoverAsync: true });
    else if (a === '--clock-skew') o.clockSkew = true;
    else if (a === '--net-cut') netCut = true;
    else if (a === '--cuts') ((o.netCuts = val()), (cutsGiven = netCut = true));
    else if (a === '--keep') o.keep = true;
    else throw new Error(`unknown option ${a}`);
  }
  // The restart is of the shared server; the failover's primary is a cluster of the run's own.
  if (o.pgRestart && o.pgFailover) throw new Error('--pg-restart and --pg-failover are two runs: pass one');
  if (custom) o.mode = 'custom';
  if (netCut) {
    // A cut must outlast a lease while tasks run: a short lease keeps each cut short.
    if (!ttlGiven) o.leaseTtl = NET_CUT_TTL_S;
    if (!cutsGiven) o.netCuts = o.mode === 'quick' ? 3 : 8;
  }
  return o;
}

/** mulberry32: a seeded PRNG, so a failing run can be replayed with --seed. */
export function rng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const listens = (port: number) =>
  new Promise<number | null>((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(null));
    s.listen(port, '127.0.0.1', () => {
      const got = (s.address() as { port: number }).port;
      s.close(() => resolve(got));
    });
  });

/** Ports handed out by this run: free when asked, but taken only when their process has started. */
const given = new Set<number>();

/**
 * A free port: from BATON_CHAOS_PORTS or BATON_TEST_PORTS (`lo-hi`) when set, so runs sharing a
 * machine keep to their own range; else one the system picks. Never one this run was given already.
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await anyFreePort();
    if (given.has(port)) continue;
    given.add(port);
    return port;
  }
}

async function anyFreePort(): Promise<number> {
  const range = (process.env.BATON_CHAOS_PORTS ?? process.env.BATON_TEST_PORTS)?.match(/^(\d+)-(\d+)$/);
  if (!range) return (await listens(0))!;
  const [from, to] = [Number(range[1]), Number(range[2])];
  const start = Math.floor(Math.random() * (to - from + 1));
  for (let i = 0; i <= to - from; i++) {
    const port = await listens(from + ((start + i) % (to - from + 1)));
    if (port !== null) return port;
  }
  throw new Error(`no free port in ${range[0]}`);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const log = (line: string) => process.stderr.write(`[chaos ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
