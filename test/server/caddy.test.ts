/**
 * `baton up` behind a real Caddy 2 (Debian's package), configured with the Caddyfile block
 * docs/operations.md shows ("Behind a reverse proxy"), read from the page as it stands with its
 * site address and upstream replaced by the test's. 60 workers long-poll through it for the full
 * 60 s beside an event stream, submits, completions and webhook deliveries (test/helpers/proxy-front.ts
 * says what is checked). Caddy runs as this test's child with its own configuration and data
 * directory in a temporary directory, with its admin endpoint off. Missing, it is installed the
 * way .ci/run installs it; BATON_TEST_CADDY names another binary.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, it } from 'vitest';
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

const CADDY = process.env.BATON_TEST_CADDY ?? '/usr/bin/caddy';

let ts: TestStore;
let dir: string;
let baton: (Child & { url: string }) | undefined;
let caddy: Front | undefined;

beforeAll(async () => {
  ensureDebianBinary(CADDY, 'caddy');
  ts = await openTestStore();
  dir = mkdtempSync(join(tmpdir(), 'baton-caddy-'));
  baton = await startBatonUp({ ...ts.env, BATON_TRUSTED_PROXIES: '127.0.0.1', BATON_CANARY_INTERVAL_MS: '0' }, await testPort());
  const caddyPort = await testPort();
  let site = replaceOnce(
    documentedBlock('caddyfile', 'test/server/caddy.test.ts'),
    'baton.example.com {',
    `http://127.0.0.1:${caddyPort} {`,
  );
  site = replaceOnce(site, 'reverse_proxy 127.0.0.1:7070', `reverse_proxy 127.0.0.1:${new URL(baton.url).port}`);
  // Global options of this test only: no admin endpoint (it would take port 2019).
  writeFileSync(join(dir, 'Caddyfile'), `{\n\tadmin off\n}\n\n${site}`);
  caddy = await startFront(`http://127.0.0.1:${caddyPort}`, CADDY, ['run', '--config', join(dir, 'Caddyfile'), '--adapter', 'caddyfile'], {
    env: { ...process.env, HOME: dir, XDG_DATA_HOME: join(dir, 'data'), XDG_CONFIG_HOME: join(dir, 'config') },
  });
}, 120_000);

afterAll(async () => {
  await caddy?.stop();
  await stopChild(baton);
  await ts?.cleanup();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe(`baton up behind Caddy, configured as docs/operations.md shows (${STORE_KIND})`, () => {
  it('60 long-polling workers, an event stream and webhooks: nothing refused, no long-poll cut, events as they happen', async () => {
    const key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    await runThroughProxy({ front: caddy!.front, baton: baton!.url, key, workers: 60, clients: ['127.0.0.21'], tasks: 25, deliveries: 5 });
  }, 240_000);
});
