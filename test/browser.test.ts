/**
 * The dashboard in a real browser (Debian's Chromium driven by playwright-core) against a real
 * `baton up` child process and a real `baton worker` child serving the agent. It is UI, not
 * storage: it runs in the sqlite project only (the API under it is tested on both stores).
 * Screenshots of every page are taken; with BATON_UPDATE_SCREENSHOTS=1 they replace the copies
 * under docs/screenshots/ that the README shows.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BATON_BIN, freePort, spawnChild, startBatonUp, type Child } from './helpers/process.ts';
import { STORE_KIND } from './helpers/store.ts';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const CHROMIUM = process.env.BATON_CHROMIUM ?? '/usr/bin/chromium';
/**
 * Screenshots are always taken; they replace the README's copies in docs/screenshots/ only with
 * BATON_UPDATE_SCREENSHOTS=1, so an ordinary test run does not rewrite committed images.
 */
const UPDATE_SHOTS = process.env.BATON_UPDATE_SCREENSHOTS === '1';
const describeBrowser = STORE_KIND === 'sqlite' ? describe : describe.skip;

describeBrowser('dashboard in Chromium against baton up + baton worker', () => {
  let dir: string;
  let server: Child & { url: string };
  let worker: Child | undefined;
  let browser: Browser;
  let page: Page;
  let key: string;
  let shots: string;
  const gate = (name: string) => join(dir, `gate-${name}`);

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run does it)`);
    if (!existsSync(join(ROOT, 'web/dist/index.html')))
      execFileSync(process.execPath, [join(ROOT, 'node_modules/vite/bin/vite.js'), 'build', 'web', '--logLevel', 'warn'], { cwd: ROOT });
    dir = mkdtempSync(join(tmpdir(), 'baton-browser-'));
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('BATON_')));
    for (const k of Object.keys(process.env)) if (k.startsWith('BATON_')) delete base[k];
    server = await startBatonUp({ BATON_DATA_DIR: dir, BATON_DATABASE_URL: '', BATON_CANARY_INTERVAL_MS: '2000' }, await freePort());
    key = readFileSync(join(dir, 'admin.key'), 'utf8').trim();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--disable-dev-shm-usage',
      ],
    });
    page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
    page.on('dialog', (d) => void d.accept());
    shots = UPDATE_SHOTS ? join(ROOT, 'docs/screenshots') : join(dir, 'screenshots');
    mkdirSync(shots, { recursive: true });
  });

  afterAll(async () => {
    await browser?.close();
    for (const c of [worker, server]) {
      if (c && c.proc.exitCode === null) {
        c.proc.kill('SIGTERM');
        const t = setTimeout(() => c.proc.kill('SIGKILL'), 10_000);
        await c.exited;
        clearTimeout(t);
      }
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const shot = (name: string) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  /** The status badge in the execution page's facts list. */
  const statusOf = (p: Page) => p.locator('dl.facts .status').first();

  function startWorker(agent: string) {
    // Each task prints lines, then waits for its gate file (named by its execution id) to exist.
    const script =
      'read m; echo "working on: $m"; echo "progress 1/2" >&2; while [ ! -f "$GATE_DIR/gate-$BATON_EXECUTION_ID" ]; do sleep 0.1; done; echo "progress 2/2"; echo "{\\"done\\":\\"$m\\"}"';
    worker = spawnChild([BATON_BIN, 'worker', '--agent', agent, '--kill-grace', '1', '--', 'sh', '-c', script], {
      BATON_URL: server.url,
      BATON_API_KEY: key,
      BATON_DATA_DIR: dir,
      GATE_DIR: dir,
      BATON_LOG_LEVEL: 'warn',
    });
  }

  it('signs in with the API key', async () => {
    await page.goto(server.url + '/');
    await page.getByLabel('API key').waitFor();
    await shot('signin');
    await page.getByLabel('API key').fill('bt_wrong');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText(/Sign-in failed/).waitFor();
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('No agents yet').waitFor();
    await page.locator('.live-live').waitFor(); // the event stream is open
  });

  it('creates an agent from the overview', async () => {
    await page.getByRole('button', { name: 'New agent' }).click();
    await page.locator('input[name=agent-name]').fill('demo');
    await page.locator('input[name=max-parallel]').fill('1');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.getByRole('heading', { name: 'Agent demo' }).waitFor();
    expect(await page.locator('[data-field=running]').textContent()).toBe('0 / 1');
    await page.getByRole('button', { name: 'Edit settings' }).click();
    await page.locator('input[name=set-max-backlog]').fill('50');
    await page.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.locator('[data-field=queued]').textContent()).toBe('0 / 50');
    await page.getByRole('button', { name: 'Close' }).click();
  });

  it('creates a schedule, runs it now, and sees the run go queued → running → succeeded live, with logs', async () => {
    // A marker that a full page load would erase: every change below arrives over SSE.
    await page.evaluate(() => ((window as any).__noReload = true));
    await page.getByRole('button', { name: 'New schedule' }).click();
    await page.locator('input[name=schedule-name]').fill('nightly');
    await page.locator('input[name=schedule-cron]').fill('0 3 * * *');
    await page.locator('input[name=schedule-timezone]').fill('UTC');
    await page.locator('input[name=schedule-message]').fill('one');
    await page.getByRole('button', { name: 'Create schedule' }).click();
    await page.getByText('every day at 03:00').waitFor();
    await page.getByRole('button', { name: 'Run now' }).click();
    const started = page.locator('.outcome.ok a');
    await started.waitFor();
    const first = (await started.textContent())!;
    await started.click();
    expect(first).toMatch(/^ex_/);
    await page.getByRole('heading', { name: `Execution ${first}` }).waitFor();
    await expect.poll(() => statusOf(page).textContent(), { timeout: 20_000 }).toBe('queued');

    startWorker('demo');
    await expect.poll(() => statusOf(page).textContent(), { timeout: 30_000 }).toBe('running');
    await page.locator('pre.logs').getByText('working on: one').waitFor({ timeout: 20_000 });
    await page.locator('pre.logs').getByText('progress 1/2').waitFor({ timeout: 20_000 });
    await shot('execution-running');

    writeFileSync(gate(first), '');
    await expect.poll(() => statusOf(page).textContent(), { timeout: 30_000 }).toBe('succeeded');
    await page.locator('pre.logs').getByText('progress 2/2').waitFor({ timeout: 20_000 });
    await page.locator('[data-logstate=ended]').waitFor({ timeout: 20_000 });
    await page.locator('pre.json').getByText('{"done":"one"}').waitFor();
    const steps = await page.locator('.timeline li').evaluateAll((els) => els.map((e) => e.getAttribute('data-to')));
    expect(steps).toEqual(['queued', 'running', 'succeeded']);
    expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
    await shot('execution');
  });

  it('says "already running" with a link to the running execution when triggered again', async () => {
    await page.goto(server.url + '/#/schedules');
    await page.getByRole('button', { name: 'Run now' }).click();
    const started = page.locator('.outcome.ok a');
    await started.waitFor();
    const running = (await started.textContent())!;
    await page.getByRole('button', { name: 'Run now' }).click();
    await page.getByText('Already running — no new run was started.').waitFor();
    expect(await page.locator('.outcome.warn a').textContent()).toBe(running);
    await shot('schedules-already-running');
    await page.locator('.outcome.warn a').click();
    await page.getByRole('heading', { name: `Execution ${running}` }).waitFor();
    await expect.poll(() => statusOf(page).textContent(), { timeout: 30_000 }).toBe('running');
    writeFileSync(gate(running), '');
    await expect.poll(() => statusOf(page).textContent(), { timeout: 30_000 }).toBe('succeeded');
  });

  it('cancels a queued execution', async () => {
    // Hold the single seat with a task that waits for its gate, then queue one more and cancel it.
    await page.goto(server.url + `/#/agents/demo`);
    await page.locator('input[name=task-message]').fill('two');
    await page.getByRole('button', { name: 'Run task' }).click();
    await page.locator('.outcome.ok a').waitFor();
    const second = await page.locator('.outcome.ok a').textContent();
    await page.locator('input[name=task-message]').fill('three');
    await page.getByRole('button', { name: 'Run task' }).click();
    await expect.poll(async () => page.locator('.outcome.ok a').textContent()).not.toBe(second);
    const third = (await page.locator('.outcome.ok a').textContent())!;
    expect(third).toMatch(/^ex_/);
    await page.locator('.outcome.ok a').click();
    await page.getByRole('heading', { name: `Execution ${third}` }).waitFor();
    await page.getByRole('button', { name: 'Cancel' }).click();
    await expect.poll(() => statusOf(page).textContent(), { timeout: 20_000 }).toBe('cancelled');
    writeFileSync(gate(second!), '');
  });

  it('says so when the backlog is full and nothing was started', async () => {
    const api = (method: string, path: string, body?: unknown) =>
      fetch(server.url + path, {
        method,
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    expect((await api('POST', '/v1/agents', { name: 'full', max_backlog: 0 })).status).toBe(201);
    const created = await api('POST', '/v1/agents/full/schedules', { name: 'hourly', cron: '0 * * * *', message: 'x' });
    expect(created.status).toBe(201);
    const { id } = (await created.json()) as { id: string };
    await page.goto(server.url + '/#/schedules');
    const card = page.locator(`[data-schedule="${id}"]`);
    await card.getByText('every hour, on the hour').waitFor();
    await card.getByRole('button', { name: 'Run now' }).click();
    await card.getByText(/Backlog full — no run was started/).waitFor();
    expect(await card.locator('.outcome a').count()).toBe(0);
    expect(((await (await api('GET', '/v1/executions?agent=full')).json()) as { executions: unknown[] }).executions).toEqual([]);
  });

  it('shows every page in words, at laptop and phone widths', async () => {
    await page.goto(server.url + '/#/executions');
    await page.locator('table.executions').waitFor();
    await expect.poll(() => page.locator('table.executions tbody tr').count()).toBeGreaterThanOrEqual(3);
    await shot('executions');
    await page.goto(server.url + '/#/agents/demo');
    await page.getByRole('heading', { name: 'Agent demo' }).waitFor();
    await shot('agent');
    await page.goto(server.url + '/#/canary');
    await page.getByRole('heading', { name: 'Past violations' }).waitFor();
    await page.locator('.card .state.loading').first().waitFor({ state: 'detached' });
    await shot('canary');
    await page.goto(server.url + '/#/schedules');
    await page.locator('.schedule').first().waitFor();
    await shot('schedules');
    await page.goto(server.url + '/#/');
    await page.locator('[data-agent=demo]').waitFor();
    await shot('overview');
    await page.setViewportSize({ width: 390, height: 844 });
    await page.reload();
    await page.locator('[data-agent=demo]').waitFor();
    // Nothing wider than the phone: the page itself does not scroll sideways.
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await shot('overview-phone');
    await page.goto(server.url + '/#/executions');
    await page.locator('table.executions tbody tr a').first().click();
    await page.getByRole('heading', { name: /^Execution ex_/ }).waitFor();
    await page.locator('.timeline li').first().waitFor();
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await shot('execution-phone');
  });
});
