/**
 * Flow control on the dashboard, in Debian's Chromium (playwright-core) against a real `baton up`
 * child on each store: a pool and a keyed agent drawing from it, with work held by a key cap and
 * by the pool's seats. The agent page shows its flow limits and live keys, the execution page
 * names the limiting key or pool in words, the pools pages show seats, throttle and budget.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import { freePort, startBatonUp, type Child } from '../helpers/process.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';

const CHROMIUM = process.env.BATON_CHROMIUM ?? '/usr/bin/chromium';
describe('dashboard: pools, keys and flow waiting in Chromium', () => {
  let ts: TestStore;
  let server: Child & { url: string };
  let api: BatonClient;
  let browser: Browser;
  let page: Page;
  let key: string;
  /** user:1's second task: waits for its key's one seat. */
  let keyWaiter: string;
  /** user:2's task: waits for the pool's one seat once the pool is lowered to one. */
  let poolWaiter: string;
  let holder: string;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run does it)`);
    if (!existsSync(join(process.cwd(), 'web/dist/index.html'))) throw new Error('web/dist is missing: npm run build:web');
    ts = await openTestStore();
    server = await startBatonUp({ BATON_DATABASE_URL: '', ...ts.env }, await freePort());
    key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    api = new BatonClient({ server: server.url, key });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-dev-shm-usage'],
    });
    page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  });

  afterAll(async () => {
    await browser?.close();
    if (server && server.proc.exitCode === null) {
      server.proc.kill('SIGTERM');
      const t = setTimeout(() => server.proc.kill('SIGKILL'), 10_000);
      await server.exited;
      clearTimeout(t);
    }
    await ts?.cleanup();
  });

  const text = (sel: string) => page.locator(sel).first().textContent();

  it('sets up a pool, a keyed agent drawing from it, and work: one task running, others waiting', async () => {
    await api.createPool({
      name: 'provider',
      max_parallel: 3,
      throttle: { limit: 100, period_seconds: 60, burst: 5 },
      budget: { limits: [{ metric: 'total_tokens', window: 'minute', limit: 400000 }] },
    });
    await api.createAgent({
      name: 'tenants',
      max_parallel: 5,
      key_max_parallel: 1,
      key_overrides: { 'user:big': 2 },
      key_throttle: { limit: 30, period_seconds: 60 },
      throttle: { limit: 600, period_seconds: 60 },
      pools: ['provider'],
    });
    const first = await api.submit('tenants', { message: 'one', key: 'user:1' });
    keyWaiter = (await api.submit('tenants', { message: 'two', key: 'user:1' })).execution_id;
    poolWaiter = (await api.submit('tenants', { message: 'three', key: 'user:2' })).execution_id;
    const [task] = await api.claim('tenants', { worker_id: 'w1' });
    expect(task?.execution_id).toBe(first.execution_id);
    holder = first.execution_id;
  });

  it("shows the agent's flow limits and live keys", async () => {
    await page.goto(server.url + '/');
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.goto(server.url + '/#/agents/tenants');
    await page.getByRole('heading', { name: 'Agent tenants' }).waitFor();
    expect(await text('[data-field=key-cap]')).toBe('1 running per key · overrides: user:big 2');
    expect(await text('[data-field=key-throttle]')).toBe('30 starts per 60 s, each key');
    expect(await text('[data-field=throttle]')).toBe('600 starts per 60 s');
    expect(await text('[data-field=pools]')).toBe('provider');
    const user1 = page.locator('tr[data-key="user:1"]');
    await user1.waitFor();
    expect(await user1.locator('[data-field=key-running]').textContent()).toBe('1 / 1');
    expect(await user1.locator('[data-field=key-queued]').textContent()).toBe('1');
    const user2 = page.locator('tr[data-key="user:2"]');
    expect(await user2.locator('[data-field=key-running]').textContent()).toBe('0 / 1');
    expect(await user2.locator('[data-field=key-queued]').textContent()).toBe('1');
    expect(await page.locator('tr[data-key]').count()).toBe(2);
  });

  it('names a busy key readably on the waiting execution, with the holder of its seat', async () => {
    await page.goto(server.url + `/#/executions/${keyWaiter}`);
    await page.getByRole('heading', { name: 'Why is it waiting?' }).waitFor();
    expect(await text('[data-field=waiting-reason]')).toBe('key busy key_busy');
    const facts = page.locator('[data-waiting-key="user:1"]');
    expect(await facts.locator(`a[href="#/executions/${holder}"]`).count()).toBe(1);
    expect(await facts.textContent()).toBe(`1 / 1 held by ${holder}`);
  });

  it('lists the pool with its seats in use, throttle and budget, and links to its page with its agents', async () => {
    await page.goto(server.url + '/#/');
    await page.getByRole('link', { name: 'Pools', exact: true }).click();
    const row = page.locator('tr[data-pool=provider]');
    await row.waitFor();
    expect(await row.locator('[data-field=pool-seats]').textContent()).toBe('1 / 3');
    expect(await row.locator('[data-field=pool-throttle]').textContent()).toContain('100 starts per 60 s (burst 5)');
    expect(await row.locator('[data-field=pool-budget]').textContent()).toContain('total_tokens 0 / 400000 per minute');
    await row.getByRole('link', { name: 'provider' }).click();
    await page.getByRole('heading', { name: 'Pool provider' }).waitFor();
    expect(await text('[data-field=pool-seats]')).toBe('1 / 3');
    const agent = page.locator('tr[data-agent=tenants]');
    expect(await agent.textContent()).toBe('tenants1 / 52');
    await agent.getByRole('link', { name: 'tenants' }).click();
    await page.getByRole('heading', { name: 'Agent tenants' }).waitFor();
  });

  it('names a full pool readably once its seats are lowered to the one in use', async () => {
    await api.updatePool('provider', { max_parallel: 1 });
    await page.goto(server.url + `/#/executions/${poolWaiter}`);
    await page.getByRole('heading', { name: 'Why is it waiting?' }).waitFor();
    expect(await text('[data-field=waiting-reason]')).toBe('pool full pool_full');
    expect(await text('[data-waiting-pool=provider]')).toBe(`1 / 1 held by ${holder} (tenants)`);
    await page.getByRole('link', { name: 'provider', exact: true }).click();
    await page.getByRole('heading', { name: 'Pool provider' }).waitFor();
    expect(await text('[data-field=pool-seats]')).toBe('1 / 1');
  });
});
