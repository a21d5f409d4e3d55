/**
 * The dashboard in a real browser (Debian's Chromium driven by playwright-core) against a
 * `baton up` started in this process, on both stores: the overview says what holds each agent,
 * the groups list says where each join stands, and every page runs under the dashboard's
 * Content-Security-Policy without one violation. test/server/browser.test.ts drives the rest of
 * the dashboard (sqlite only); this file asserts what the stores answer, so it runs on both.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatonClient } from '../../src/client.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { DASHBOARD_CSP } from '../../src/api/web.ts';
import { startTestNode } from '../helpers/delivery.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CHROMIUM = process.env.BATON_CHROMIUM ?? '/usr/bin/chromium';

describe(`dashboard overview, groups and CSP in Chromium (${STORE_KIND})`, () => {
  let ts: TestStore;
  let node: BatonNode;
  let api: BatonClient;
  let key: string;
  let browser: Browser;
  let page: Page;
  /** Every CSP violation the page reported, from its own event and from the console. */
  const violations: string[] = [];

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run does it)`);
    if (!existsSync(join(ROOT, 'web/dist/index.html')))
      execFileSync(process.execPath, [join(ROOT, 'node_modules/vite/bin/vite.js'), 'build', 'web', '--logLevel', 'warn'], { cwd: ROOT });
    ts = await openTestStore();
    ({ node, api, key } = await startTestNode(ts, { dispatcher: false }));
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-dev-shm-usage'],
    });
    page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
    page.on('dialog', (d) => void d.accept());
    page.on('console', (m) => {
      if (/Content[- ]Security[- ]Policy/i.test(m.text())) violations.push(`console: ${m.text()}`);
    });
    await page.exposeFunction('__cspViolation', (v: string) => violations.push(v));
    await page.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (e) =>
        (window as unknown as { __cspViolation(v: string): void }).__cspViolation(`${e.violatedDirective}: ${e.blockedURI}`),
      );
    });
  });

  afterAll(async () => {
    await browser?.close();
    await node?.stop();
    await ts?.cleanup();
  });

  /** Queue `n` tasks on `agent` and finish each one through the engine, as a worker would. */
  async function runTasks(agent: string, n: number, outcome: { status: 'succeeded' | 'failed'; usage?: unknown }) {
    for (let i = 0; i < n; i++) {
      await api.submit(agent, { message: `task ${i}` });
      const [row] = await node.engine.claim(agent, { owner: 'w' });
      await node.engine.complete(
        row!.id,
        row!.lease_token!,
        outcome.status === 'failed'
          ? { status: 'failed', error: { code: 'boom', message: 'no' } }
          : { status: 'succeeded', usage: outcome.usage },
        'w',
      );
    }
  }

  it('serves the dashboard with a strict CSP, nosniff, a referrer policy and no framing', async () => {
    const res = await fetch(node.url + '/');
    expect(res.status).toBe(200);
    const csp = res.headers.get('content-security-policy')!;
    expect(csp).toBe(DASHBOARD_CSP);
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe-inline');
    expect(csp).not.toContain('unsafe-eval');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('referrer-policy')).toBe('same-origin');
    const script = /src="(\/assets\/[^"]+\.js)"/.exec(await res.text())![1]!;
    const asset = await fetch(node.url + script);
    expect(asset.status).toBe(200);
    expect(asset.headers.get('x-content-type-options')).toBe('nosniff');
  });

  it('signs in under the CSP', async () => {
    await page.goto(node.url + '/');
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('No agents yet').waitFor();
    await page.locator('.live-live').waitFor(); // the event stream is open: connect-src allows it
  });

  it('the overview says what holds each agent: paused, held, budget spent, breaker open', async () => {
    await api.createAgent({ name: 'free', max_parallel: 1 });
    await api.createAgent({ name: 'paused', max_parallel: 1 });
    await api.pauseAgent('paused', 'deploying v2');
    await api.createAgent({ name: 'spent', max_parallel: 1, budget: { limits: [{ metric: 'cost_usd', window: 'day', limit: 1 }] } });
    await runTasks('spent', 3, { status: 'succeeded', usage: { cost_usd: 0.4 } });
    await api.createAgent({
      name: 'broken',
      max_parallel: 1,
      breaker: { consecutive: 1, ratio: 1, window: 1, cooldown_ms: 3_600_000, max_cooldown_ms: 3_600_000, count: ['agent_error'] },
    });
    await runTasks('broken', 1, { status: 'failed' });
    await api.createAgent({ name: 'lapsed', max_parallel: 1 });
    // The reaper sets this hold when several leases lapse at once (test/engine/lapse.test.ts does it); written here.
    await ts.store.db.updateTable('agents').set({ lapse_hold_at: Date.now(), lapse_hold_count: 3 }).where('name', '=', 'lapsed').execute();
    for (const a of ['free', 'paused', 'spent', 'broken', 'lapsed']) await api.submit(a, { message: 'waits' });

    await page.goto(node.url + '/#/');
    const hold = (agent: string) => page.locator(`[data-agent=${agent}] [data-hold]`);
    await hold('paused').waitFor();
    expect(await hold('paused').getAttribute('data-hold')).toBe('agent_paused');
    expect(await hold('paused').textContent()).toMatch(/^paused admits nothing: paused by .+: "deploying v2"$/);
    expect(await hold('spent').getAttribute('data-hold')).toBe('budget_spent');
    expect(await hold('spent').textContent()).toContain('cost_usd budget per day spent (1.2 of 1)');
    expect(await hold('broken').getAttribute('data-hold')).toBe('breaker_open');
    expect(await hold('broken').textContent()).toMatch(/^breaker open admits nothing: breaker open; a probe in (59|60) min$/);
    expect(await hold('lapsed').getAttribute('data-hold')).toBe('lapse_hold');
    expect(await hold('lapsed').textContent()).toContain('3 leases lapsed together');
    expect(await hold('free').count()).toBe(0);

    // Resumed, it admits again: the overview says nothing holds it.
    await api.resumeAgent('paused');
    await page.reload();
    await hold('spent').waitFor();
    expect(await hold('paused').count()).toBe(0);
  });

  it('the groups list shows the join: its agent, execution and status', async () => {
    await api.createAgent({ name: 'members', max_parallel: 5 });
    await api.createAgent({ name: 'joiner', max_parallel: 0 });
    const g = await api.createGroup({ members: [{ agent: 'members', message: 'a' }], join: { agent: 'joiner', message: 'sum' } });
    await page.goto(node.url + '/#/groups');
    const cell = page.locator(`[data-group="${g.id}"] [data-field=join]`);
    await cell.getByText('on joiner, when the group decides (waiting)').waitFor();
    await runTasks('members', 1, { status: 'succeeded' });
    const joined = await api.getGroup(g.id);
    expect(joined.join!.execution_id).toMatch(/^ex_/);
    await cell.locator('a.mono').getByText(joined.join!.execution_id!).waitFor({ timeout: 20_000 });
    expect(await cell.locator('.status').textContent()).toBe('queued');
    expect(await cell.locator('a').first().textContent()).toBe('joiner');
  });

  it('every page runs under the CSP without a violation', async () => {
    const queued = (await api.listExecutions({ agent: 'paused', limit: 1 })).executions[0]!.id;
    const pages: Array<[string, string]> = [
      ['/#/executions', 'table.executions'],
      ['/#/agents/spent', '[data-field=budget]'],
      ['/#/agents/broken', '[data-field=breaker]'],
      [`/#/executions/${queued}`, 'dl.facts'],
      ['/#/schedules', 'h2'],
      ['/#/canary', 'h2'],
      ['/#/groups', 'table'],
      ['/#/', '[data-chart="canary violations"] canvas'],
    ];
    for (const [path, ready] of pages) {
      await page.goto(node.url + path);
      await page.locator(ready).first().waitFor();
    }
    await page.locator('[data-spark=spent] canvas').first().waitFor(); // uPlot draws under the CSP
    await page.waitForTimeout(300); // a report is dispatched after the blocked load
    expect(violations).toEqual([]);
  });
});
