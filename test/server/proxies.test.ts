/**
 * `baton up` behind a real nginx and a real Caddy 2 (Debian's packages), each configured with its
 * block of docs/operations.md ("Behind a reverse proxy") as it stands, only addresses replaced
 * (test/helpers/proxy-setups.ts), each in front of a `baton up` and a store of its own.
 *   - nginx: 600 workers long-poll through it for the full 60 s from three client addresses
 *     (127.0.0.11–13, 200 each: under the default limit of 256 per address, over it for the one
 *     address nginx connects from);
 *   - Caddy: 60 workers long-poll through it for the full 60 s;
 * each beside an event stream, submits, completions and webhook deliveries. Nothing may be refused
 * or cut, events must arrive while the stream stays open, and a webhook run must carry the
 * client's address even when the client sent its own X-Forwarded-For (test/helpers/proxy-front.ts
 * says what is checked). The two proxies share nothing, so their minutes of waiting overlap: the
 * tests run at once.
 * BATON_TEST_PORTS=FROM-TO makes the test take its ports from that range (a shared machine).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runThroughProxy } from '../helpers/proxy-front.ts';
import { startCaddy, startNginx, type Proxied } from '../helpers/proxy-setups.ts';
import { STORE_KIND } from '../helpers/store.ts';

let nginx: Proxied | undefined;
let caddy: Proxied | undefined;

beforeAll(async () => {
  const [n, c] = await Promise.allSettled([startNginx(), startCaddy()]);
  if (n.status === 'fulfilled') nginx = n.value;
  if (c.status === 'fulfilled') caddy = c.value;
  for (const r of [n, c]) if (r.status === 'rejected') throw r.reason;
}, 120_000);

afterAll(async () => {
  await Promise.all([nginx?.stop(), caddy?.stop()]);
});

describe.concurrent(`baton up behind nginx and Caddy, configured as docs/operations.md shows (${STORE_KIND})`, () => {
  it('nginx: 600 long-polling workers, an event stream and webhooks: nothing refused, no long-poll cut, events as they happen', async () => {
    // 200 workers from each of three addresses: under the default limit of 256 per address, over
    // it for the one address nginx connects from.
    await runThroughProxy({
      front: nginx!.front,
      baton: nginx!.baton,
      key: nginx!.key,
      workers: 600,
      clients: ['127.0.0.11', '127.0.0.12', '127.0.0.13'],
      tasks: 290,
      deliveries: 10,
    });
    const log = readFileSync(join(nginx!.dir, 'error.log'), 'utf8');
    expect(log).not.toMatch(/upstream timed out|upstream prematurely closed|no live upstreams|worker_connections are not enough/);
  }, 240_000);

  it('Caddy: 60 long-polling workers, an event stream and webhooks: nothing refused, no long-poll cut, events as they happen', async () => {
    await runThroughProxy({
      front: caddy!.front,
      baton: caddy!.baton,
      key: caddy!.key,
      workers: 60,
      clients: ['127.0.0.21'],
      tasks: 25,
      deliveries: 5,
    });
  }, 240_000);
});
