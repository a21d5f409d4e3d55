/**
 * A throwaway PostgreSQL cluster from the machine's binaries (/usr/lib/postgresql/<v>/bin), for
 * tests that need a server of their own (its disk filled, a standby to fail over to) and for the
 * chaos run's `--pg-failover`. Run as the `postgres` user when we are root; stopped with
 * `pg_ctl stop -m fast`.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';

/** The newest installed PostgreSQL's bin directory, if any. */
export function pgBinDir(): string | undefined {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length ? join(root, versions[0]!, 'bin') : undefined;
}

export interface PgCluster {
  url: string;
  port: number;
  stop(): void;
  /** Stop as a crash would (`pg_ctl stop -m immediate`): no shutdown checkpoint, clients cut. */
  kill(): void;
  /**
   * A standby's promotion to primary, as Patroni does it: `pg_ctl promote`, then wait until the
   * server is out of recovery (Patroni passes -W and polls pg_controldata; -w waits for the same).
   * Asynchronous, so a caller's own clients keep running while it waits.
   */
  promote(): Promise<void>;
}

function asPostgresArgv(bin: string, args: string[]): [string, string[]] {
  return process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
}

function asPostgres(bin: string, args: string[]): void {
  const [cmd, argv] = asPostgresArgv(bin, args);
  execFileSync(cmd, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
}

function ownedDirs(dirs: string[]): void {
  for (const d of dirs) {
    mkdirSync(d, { recursive: true });
    chmodSync(d, 0o755);
    if (process.getuid?.() === 0) {
      const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
      const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
      chownSync(d, uid, gid);
    }
  }
}

/** Settings every cluster here starts with; `settings` of startPgCluster/startPgStandby add to them. */
const FLAGS = '-c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50 -c shared_buffers=16MB';

const flags = (settings: Record<string, string | number> = {}) =>
  [FLAGS, ...Object.entries(settings).map(([k, v]) => `-c ${k}=${v}`)].join(' ');

function running(bin: string, dataDir: string, port: number): PgCluster {
  let up = true;
  const ctl = (args: string[]) => asPostgres(join(bin, 'pg_ctl'), ['-D', dataDir, ...args]);
  return {
    url: `postgres://postgres@127.0.0.1:${port}/test`,
    port,
    stop() {
      if (!up) return;
      up = false;
      ctl(['-m', 'fast', '-w', 'stop']);
    },
    kill() {
      if (!up) return;
      up = false;
      ctl(['-m', 'immediate', '-w', 'stop']);
    },
    async promote() {
      const [cmd, argv] = asPostgresArgv(join(bin, 'pg_ctl'), ['-D', dataDir, '-w', 'promote']);
      await promisify(execFile)(cmd, argv);
    },
  };
}

/**
 * A streaming standby of the cluster on 127.0.0.1:`primaryPort` (pg_basebackup -R), started on
 * `port`. Its walreceiver's application_name is `standby`; the primary waits for it only once
 * synchronous_standby_names names it.
 */
export function startPgStandby(opts: {
  primaryPort: number;
  dataDir: string;
  workDir: string;
  port: number;
  settings?: Record<string, string | number>;
}): PgCluster {
  const bin = pgBinDir();
  if (!bin) throw new Error('no PostgreSQL binaries under /usr/lib/postgresql');
  ownedDirs([opts.dataDir, opts.workDir]);
  // PostgreSQL starts only from a data directory its owner alone may enter.
  chmodSync(opts.dataDir, 0o700);
  asPostgres(join(bin, 'pg_basebackup'), [
    '-h',
    '127.0.0.1',
    '-p',
    String(opts.primaryPort),
    '-U',
    'postgres',
    '-D',
    opts.dataDir,
    '-R',
    '-X',
    'stream',
    // An immediate checkpoint: the default spreads it over most of checkpoint_timeout (minutes).
    '-c',
    'fast',
    '--no-sync',
  ]);
  const options = `-p ${opts.port} -k ${opts.dataDir} ${flags(opts.settings)} -c cluster_name=standby`;
  asPostgres(join(bin, 'pg_ctl'), ['-D', opts.dataDir, '-o', options, '-w', '-l', join(opts.workDir, 'server.log'), 'start']);
  return running(bin, opts.dataDir, opts.port);
}

/**
 * initdb in `dataDir`, with its WAL and log in `workDir` (which may sit on another filesystem), then
 * start on 127.0.0.1:`port` with database `test`.
 */
export function startPgCluster(opts: {
  dataDir: string;
  workDir: string;
  port: number;
  settings?: Record<string, string | number>;
}): PgCluster {
  const bin = pgBinDir();
  if (!bin) throw new Error('no PostgreSQL binaries under /usr/lib/postgresql');
  const walDir = join(opts.workDir, 'wal');
  ownedDirs([opts.dataDir, opts.workDir]);
  asPostgres(join(bin, 'initdb'), ['-D', opts.dataDir, '--waldir', walDir, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8']);
  const options = `-p ${opts.port} -k ${opts.dataDir} ${flags(opts.settings)}`;
  asPostgres(join(bin, 'pg_ctl'), ['-D', opts.dataDir, '-o', options, '-w', '-l', join(opts.workDir, 'server.log'), 'start']);
  asPostgres(join(bin, 'createdb'), ['-h', '127.0.0.1', '-p', String(opts.port), '-U', 'postgres', 'test']);
  return running(bin, opts.dataDir, opts.port);
}

/** One statement on a fresh connection to `url`. */
export async function query<T extends pg.QueryResultRow>(url: string, text: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(text)).rows;
  } finally {
    await client.end();
  }
}

/** How the primary at `url` sees its standby right now (null: none streaming). */
export async function standbyState(url: string): Promise<{ sync_state: string; lag_bytes: number } | null> {
  const rows = await query<{ sync_state: string; lag_bytes: string | null }>(
    url,
    "SELECT sync_state, pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)::text AS lag_bytes FROM pg_stat_replication WHERE application_name = 'standby'",
  );
  return rows[0] ? { sync_state: rows[0].sync_state, lag_bytes: Number(rows[0].lag_bytes ?? 0) } : null;
}

/**
 * Make the primary at `url` replicate to the standby started by startPgStandby synchronously (a
 * commit is answered once the standby has flushed it) or asynchronously (PostgreSQL's default),
 * and wait until the standby streams in that mode: until then a kill proves nothing.
 */
export async function replicateTo(url: string, mode: 'sync' | 'async', timeoutMs = 60_000): Promise<void> {
  await query(url, `ALTER SYSTEM SET synchronous_standby_names = '${mode === 'sync' ? 'standby' : ''}'`);
  await query(url, 'SELECT pg_reload_conf()');
  for (const deadline = Date.now() + timeoutMs; ;) {
    const state = await standbyState(url);
    if (state?.sync_state === mode && (mode === 'async' || state.lag_bytes === 0)) return;
    if (Date.now() > deadline) throw new Error(`the standby does not stream ${mode} (${JSON.stringify(state)})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
