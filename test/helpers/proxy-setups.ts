/**
 * The two reverse proxies test/server/proxies.test.ts puts in front of `baton up`, each configured
 * with its block of docs/operations.md as it stands (only addresses replaced), each on a store and
 * a `baton up` of its own, as a child of the test with its files in a temporary directory (never
 * the system service). Missing, a proxy is installed the way .ci/run installs it.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startBatonUp, stopChild, type Child } from './process.ts';
import { documentedBlock, ensureDebianBinary, replaceOnce, startFront, type Front } from './proxy-front.ts';
import { openTestStore, type TestStore } from './store.ts';

/** How docs/operations.md marks the block this test runs for `proxy`. */
const marker = (proxy: string) => `test/server/proxies.test.ts (${proxy})`;
const NGINX = '/usr/sbin/nginx';
const CADDY = process.env.BATON_TEST_CADDY ?? '/usr/bin/caddy';

/** A proxy in front of a `baton up` of its own. */
export interface Proxied {
  front: string;
  baton: string;
  key: string;
  dir: string;
  stop(): Promise<void>;
}

/** A store, a temporary directory and `baton up` trusting 127.0.0.1; then `front` is started. */
async function behind(name: string, front: (dir: string, batonPort: string) => Promise<Front>): Promise<Proxied> {
  const ts: TestStore = await openTestStore();
  const dir = mkdtempSync(join(tmpdir(), `baton-${name}-`));
  let baton: (Child & { url: string }) | undefined;
  let proxy: Front | undefined;
  const stop = async () => {
    await proxy?.stop();
    await stopChild(baton);
    await ts.cleanup();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    baton = await startBatonUp({ ...ts.env, BATON_TRUSTED_PROXIES: '127.0.0.1', BATON_CANARY_INTERVAL_MS: '0' }, await freePort());
    proxy = await front(dir, new URL(baton.url).port);
  } catch (err) {
    await stop();
    throw err;
  }
  const key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
  return { front: proxy.front, baton: baton.url, key, dir, stop };
}

/** nginx with the documented site block, inside the main configuration a distribution would have. */
export function startNginx(): Promise<Proxied> {
  ensureDebianBinary(NGINX, 'nginx');
  return behind('nginx', async (dir, batonPort) => {
    const nginxPort = await freePort();
    let site = replaceOnce(documentedBlock('nginx', marker('nginx')), 'server 127.0.0.1:7070;', `server 127.0.0.1:${batonPort};`);
    site = replaceOnce(site, 'listen 8080;', `listen 127.0.0.1:${nginxPort};`);
    writeFileSync(join(dir, 'baton.conf'), site);
    writeFileSync(
      join(dir, 'nginx.conf'),
      [
        'daemon off;',
        'worker_processes 1;',
        'worker_rlimit_nofile 8192;',
        `pid ${dir}/nginx.pid;`,
        `error_log ${dir}/error.log warn;`,
        'events { worker_connections 4096; }',
        'http {',
        `  access_log ${dir}/access.log;`,
        ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `  ${t}_temp_path ${dir}/${t};`),
        `  include ${dir}/baton.conf;`,
        '}',
      ].join('\n'),
    );
    return startFront(`http://127.0.0.1:${nginxPort}`, NGINX, ['-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf')]);
  });
}

/** Caddy 2 with the documented Caddyfile block, its admin endpoint off (it would take port 2019). */
export function startCaddy(): Promise<Proxied> {
  ensureDebianBinary(CADDY, 'caddy');
  return behind('caddy', async (dir, batonPort) => {
    const caddyPort = await freePort();
    let site = replaceOnce(documentedBlock('caddyfile', marker('Caddy')), 'baton.example.com {', `http://127.0.0.1:${caddyPort} {`);
    site = replaceOnce(site, 'reverse_proxy 127.0.0.1:7070', `reverse_proxy 127.0.0.1:${batonPort}`);
    writeFileSync(join(dir, 'Caddyfile'), `{\n\tadmin off\n}\n\n${site}`);
    return startFront(`http://127.0.0.1:${caddyPort}`, CADDY, ['run', '--config', join(dir, 'Caddyfile'), '--adapter', 'caddyfile'], {
      env: { ...process.env, HOME: dir, XDG_DATA_HOME: join(dir, 'data'), XDG_CONFIG_HOME: join(dir, 'config') },
    });
  });
}
