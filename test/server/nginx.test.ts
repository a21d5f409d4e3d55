/**
 * `baton up` behind a real nginx (Debian's package), configured with the block docs/operations.md
 * shows ("Behind a reverse proxy"), read from the page as it stands with only its two ports
 * replaced. 600 workers long-poll through it for the full 60 s from three client addresses
 * (127.0.0.11–13, 200 each: under the default limit of 256 per address, over it for the one
 * address nginx connects from), beside an event stream, submits, completions and webhook
 * deliveries. Nothing may be refused or cut, events must arrive while the stream stays open, and a
 * webhook run must carry the client's address even when the client sent its own X-Forwarded-For.
 *
 * nginx runs as this test's child with its own prefix, configuration and logs in a temporary
 * directory, never as the system service. Missing, it is installed the way .ci/run installs it.
 * BATON_TEST_PORTS=FROM-TO makes the test take its ports from that range (a shared machine).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBatonUp, stopChild, type Child } from '../helpers/process.ts';
import {
  documentedBlock,
  ensureDebianBinary,
  replaceOnce,
  runThroughProxy,
  startFront,
  testPort,
  type Front,
} from '../helpers/proxy-front.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const NGINX = '/usr/sbin/nginx';

let ts: TestStore;
let dir: string;
let baton: (Child & { url: string }) | undefined;
let nginx: Front | undefined;

beforeAll(async () => {
  ensureDebianBinary(NGINX, 'nginx');
  ts = await openTestStore();
  dir = mkdtempSync(join(tmpdir(), 'baton-nginx-'));
  baton = await startBatonUp({ ...ts.env, BATON_TRUSTED_PROXIES: '127.0.0.1', BATON_CANARY_INTERVAL_MS: '0' }, await testPort());
  const nginxPort = await testPort();
  let site = replaceOnce(
    documentedBlock('nginx', 'test/server/nginx.test.ts'),
    'server 127.0.0.1:7070;',
    `server 127.0.0.1:${new URL(baton.url).port};`,
  );
  site = replaceOnce(site, 'listen 8080;', `listen 127.0.0.1:${nginxPort};`);
  writeFileSync(join(dir, 'baton.conf'), site);
  // The main configuration a distribution would have, with everything in this directory.
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
  nginx = await startFront(`http://127.0.0.1:${nginxPort}`, NGINX, [
    '-p',
    dir,
    '-e',
    join(dir, 'error.log'),
    '-c',
    join(dir, 'nginx.conf'),
  ]);
}, 120_000);

afterAll(async () => {
  await nginx?.stop();
  await stopChild(baton);
  await ts?.cleanup();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe(`baton up behind nginx, configured as docs/operations.md shows (${STORE_KIND})`, () => {
  it('600 long-polling workers, an event stream and webhooks: nothing refused, no long-poll cut, events as they happen', async () => {
    const key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    // 200 workers from each of three addresses: under the default limit of 256 per address, over
    // it for the one address nginx connects from.
    await runThroughProxy({
      front: nginx!.front,
      baton: baton!.url,
      key,
      workers: 600,
      clients: ['127.0.0.11', '127.0.0.12', '127.0.0.13'],
      tasks: 290,
      deliveries: 10,
    });
    const log = readFileSync(join(dir, 'error.log'), 'utf8');
    expect(log).not.toMatch(/upstream timed out|upstream prematurely closed|no live upstreams|worker_connections are not enough/);
  }, 240_000);
});
