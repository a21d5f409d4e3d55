/**
 * A throwaway PostgreSQL cluster from the machine's binaries (/usr/lib/postgresql/<v>/bin), for
 * tests that need a server of their own (its disk filled, for example). Run as the `postgres`
 * user when we are root; stopped with `pg_ctl stop -m fast`.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

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
  /** A standby's promotion to primary (`pg_ctl promote`), as Patroni does it. */
  promote(): void;
}

function asPostgres(bin: string, args: string[]): void {
  const asRoot = process.getuid?.() === 0;
  const [cmd, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
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

const FLAGS = '-c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50 -c shared_buffers=16MB';

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
    promote() {
      ctl(['-w', 'promote']);
    },
  };
}

/**
 * A streaming standby of the cluster on 127.0.0.1:`primaryPort` (pg_basebackup -R), started on
 * `port`. Its walreceiver's application_name is `standby`; the primary waits for it only once
 * synchronous_standby_names names it.
 */
export function startPgStandby(opts: { primaryPort: number; dataDir: string; workDir: string; port: number }): PgCluster {
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
    '--no-sync',
  ]);
  const flags = `-p ${opts.port} -k ${opts.dataDir} ${FLAGS} -c cluster_name=standby`;
  asPostgres(join(bin, 'pg_ctl'), ['-D', opts.dataDir, '-o', flags, '-w', '-l', join(opts.workDir, 'server.log'), 'start']);
  return running(bin, opts.dataDir, opts.port);
}

/**
 * initdb in `dataDir`, with its WAL and log in `workDir` (which may sit on another filesystem), then
 * start on 127.0.0.1:`port` with database `test`.
 */
export function startPgCluster(opts: { dataDir: string; workDir: string; port: number }): PgCluster {
  const bin = pgBinDir();
  if (!bin) throw new Error('no PostgreSQL binaries under /usr/lib/postgresql');
  const walDir = join(opts.workDir, 'wal');
  ownedDirs([opts.dataDir, opts.workDir]);
  asPostgres(join(bin, 'initdb'), ['-D', opts.dataDir, '--waldir', walDir, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8']);
  const flags = `-p ${opts.port} -k ${opts.dataDir} ${FLAGS}`;
  asPostgres(join(bin, 'pg_ctl'), ['-D', opts.dataDir, '-o', flags, '-w', '-l', join(opts.workDir, 'server.log'), 'start']);
  asPostgres(join(bin, 'createdb'), ['-h', '127.0.0.1', '-p', String(opts.port), '-U', 'postgres', 'test']);
  return running(bin, opts.dataDir, opts.port);
}
