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
import { BATON_BIN, freePort, spawnChild, startBatonUp, type Child } from '../helpers/process.ts';
import { STORE_KIND } from '../helpers/store.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
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
  /** Serves the `charts` agent: messages starting with "fail" fail, the rest succeed. */
  let chartsWorker: Child | undefined;
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
    for (const c of [worker, chartsWorker, server]) {
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

  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(server.url + path, {
      method,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const failedIds: string[] = [];

  it('draws an agent over time: finished, durations, queue and seats, from a real run', async () => {
    expect((await api('POST', '/v1/agents', { name: 'charts', max_parallel: 2 })).status).toBe(201);
    // Six tasks at once against two seats: four wait at first, two of them fail.
    const messages = ['ok 1', 'fail 1', 'ok 2', 'ok 3', 'fail 2', 'ok 4'];
    const ids: string[] = [];
    for (const message of messages) ids.push((await api('POST', '/v1/agents/charts/executions', { message })).body.execution_id);
    failedIds.push(ids[1]!, ids[4]!);
    const script = 'read m; sleep 0.4; case "$m" in fail*) echo "it broke: $m" >&2; exit 3;; *) echo "{\\"ok\\":\\"$m\\"}";; esac';
    chartsWorker = spawnChild([BATON_BIN, 'worker', '--agent', 'charts', '--concurrency', '2', '--', 'sh', '-c', script], {
      BATON_URL: server.url,
      BATON_API_KEY: key,
      BATON_DATA_DIR: dir,
      BATON_LOG_LEVEL: 'warn',
    });
    await expect
      .poll(async () => (await api('GET', '/v1/executions?agent=charts&status=queued,running')).body.executions.length, { timeout: 60_000 })
      .toBe(0);

    await page.goto(server.url + '/#/agents/charts');
    await page.getByRole('heading', { name: 'Activity' }).waitFor();
    for (const chart of ['finished', 'duration', 'queue']) {
      await page.locator(`[data-chart=${chart}] canvas`).first().waitFor();
      expect(await page.locator(`[data-chart=${chart}] canvas`).count()).toBeGreaterThan(0);
    }
    // uPlot's legend names every line; the summary gives the counts from the same series.
    await page.locator('[data-chart=finished] .u-legend').getByText('succeeded').waitFor();
    await page.locator('[data-chart=duration] .u-legend').getByText('p95').waitFor();
    await page.locator('[data-chart=queue] .u-legend').getByText('cap').waitFor();
    await expect.poll(() => page.locator('[data-field=succeeded]').textContent()).toBe('4');
    expect(await page.locator('[data-field=failed]').textContent()).toBe('2');
    const running = Number(await page.locator('[data-field=running-max]').textContent());
    expect(running).toBeGreaterThanOrEqual(1);
    expect(running).toBeLessThanOrEqual(2);
    expect(Number(await page.locator('[data-field=queued-max]').textContent())).toBeGreaterThanOrEqual(1);
    // Hovering a bucket puts its values into the legend.
    const box = (await page.locator('[data-chart=finished] .u-over').boundingBox())!;
    await page.mouse.move(box.x + box.width - 3, box.y + box.height / 2);
    await expect.poll(() => page.locator('[data-chart=finished] .u-legend .u-value').allTextContents()).not.toContain('—');

    // The seat timeline: every run on a seat, never more seats than the cap.
    await expect.poll(() => page.locator('.seats .seat-bar').count()).toBe(6);
    const used = Number(await page.locator('.seats').getAttribute('data-seats-used'));
    expect(used).toBeGreaterThanOrEqual(1);
    expect(used).toBeLessThanOrEqual(2);
    await page.getByText(/the cap held/).waitFor();
    expect(await page.locator(`.seat-bar[data-execution="${ids[1]}"]`).getAttribute('class')).toContain('bar-failed');
    await shot('agent-activity');

    // The overview: a small chart per agent, and the canary's history.
    await page.goto(server.url + '/#/');
    await page.locator('[data-spark=charts] canvas').first().waitFor();
    expect(await page.locator('[data-spark=charts]').textContent()).toContain('4 / 2');
    await page.locator('[data-chart="canary violations"] canvas').first().waitFor();
    await page.locator('[data-field=canary-history]').waitFor();
  });

  it('finds an execution by id, pages through a list, and says what a bulk action did to each', async () => {
    await page.goto(server.url + '/#/executions');
    await page.locator('input[name=search-id]').fill('ex_nope');
    await page.getByRole('button', { name: 'Find' }).click();
    await page.getByText('No execution has the id ex_nope.').waitFor();
    await page.locator('input[name=search-id]').fill(failedIds[0]!);
    await page.getByRole('button', { name: 'Find' }).click();
    await page.getByRole('heading', { name: `Execution ${failedIds[0]}` }).waitFor();

    // Retry the two failed runs of `charts`; then retrying one again is refused, naming its retry.
    await page.goto(server.url + '/#/executions?agent=charts&status=failed');
    for (const id of failedIds) await page.locator(`tr[data-execution="${id}"] input[type=checkbox]`).check();
    await page.getByRole('button', { name: 'Retry failed (2)' }).click();
    const results = page.locator('.bulk-results');
    await results.getByText('Retry: 2 done, 0 refused').waitFor();
    const retries: string[] = [];
    for (const id of failedIds) {
      const item = results.locator(`li[data-execution="${id}"]`);
      expect(await item.getAttribute('data-outcome')).toBe('done');
      expect(await item.textContent()).toMatch(/retried as ex_/);
      retries.push((await item.locator('a').nth(1).textContent())!);
    }
    for (const [i, id] of retries.entries())
      expect((await api('GET', `/v1/executions/${id}`)).body).toMatchObject({ retry_of: failedIds[i], trigger: 'retry' });
    await page.locator(`tr[data-execution="${failedIds[0]}"] input[type=checkbox]`).check();
    await page.getByRole('button', { name: 'Retry failed (1)' }).click();
    await results.getByText('Retry: 0 done, 1 refused').waitFor();
    const refused = results.locator(`li[data-execution="${failedIds[0]}"]`);
    expect(await refused.getAttribute('data-outcome')).toBe('refused');
    expect(await refused.textContent()).toContain('already_exists');
    expect(await refused.locator('a').nth(1).textContent()).toBe(retries[0]);

    // 55 queued on an agent with no seats: two pages; cancel the 5 on the second.
    expect((await api('POST', '/v1/agents', { name: 'parked', max_parallel: 0 })).status).toBe(201);
    const parked: string[] = [];
    for (let i = 0; i < 55; i++)
      parked.push((await api('POST', '/v1/agents/parked/executions', { message: `wait ${i}` })).body.execution_id);
    await page.goto(server.url + '/#/executions?agent=parked');
    await expect.poll(() => page.locator('table.executions tbody tr').count()).toBe(50);
    await page.getByRole('button', { name: 'Older →' }).click();
    await expect.poll(() => page.locator('table.executions tbody tr').count()).toBe(5);
    expect(await page.getByRole('button', { name: 'Older →' }).isDisabled()).toBe(true);
    const oldest = await page.locator('table.executions tbody tr').evaluateAll((els) => els.map((e) => e.getAttribute('data-execution')));
    expect(new Set(oldest)).toEqual(new Set(parked.slice(0, 5)));
    await page.getByRole('checkbox', { name: 'select every execution on this page' }).check();
    await page.getByRole('button', { name: 'Cancel queued (5)' }).click();
    await results.getByText('Cancel: 5 done, 0 refused').waitFor();
    const done = await results.locator('li[data-outcome=done]').allTextContents();
    expect(done.map((t) => t.trim())).toEqual(oldest.map((id) => `${id}: cancelled`));
    await shot('executions-bulk');
    for (const id of parked.slice(0, 5)) expect((await api('GET', `/v1/executions/${id}`)).body.status).toBe('cancelled');
    await page.getByRole('button', { name: '← Newer' }).click();
    await expect.poll(() => page.locator('table.executions tbody tr').count()).toBe(50);
  });

  it('subscribes one agent to another and follows a chain and a group, live', async () => {
    // `reviewer` has no worker: what composition starts there stays queued, to be seen.
    expect((await api('POST', '/v1/agents', { name: 'reviewer', max_parallel: 1 })).status).toBe(201);
    await page.goto(server.url + '/#/agents/charts');
    await page.getByRole('heading', { name: 'Subscriptions' }).waitFor();
    await page.getByText(/No subscriptions/).waitFor();
    await page.getByRole('button', { name: 'New subscription' }).click();
    await page.locator('select[name=subscription-on]').selectOption('succeeded');
    await page.locator('input[name=subscription-target]').fill('reviewer');
    await page.locator('input[name=subscription-message]').fill('review {{source.id}}');
    await page.getByRole('button', { name: 'Create subscription' }).click();
    await page.locator('[data-subscription]').getByText('reviewer').waitFor();

    // A task of charts succeeds (its worker is still serving): its page says what it started.
    const source = (await api('POST', '/v1/agents/charts/executions', { message: 'ok chained' })).body.execution_id as string;
    await page.goto(server.url + `/#/executions/${source}`);
    await expect.poll(() => statusOf(page).textContent(), { timeout: 30_000 }).toBe('succeeded');
    const startedLink = page.getByRole('list', { name: 'started' }).locator('a').first();
    await startedLink.waitFor({ timeout: 20_000 });
    const chained = (await startedLink.textContent())!;
    await startedLink.click();
    await page.getByRole('heading', { name: `Execution ${chained}` }).waitFor();
    await page.getByText(`review ${source}`).waitFor();
    await page.locator('dl.facts').getByText(source).waitFor(); // "Started by" the source
    await shot('execution-chained');

    // A group of three charts tasks, one failing, joined on reviewer: the tree fills in live.
    const created = await api('POST', '/v1/groups', {
      members: [{ message: 'ok a' }, { message: 'fail b' }, { message: 'ok c' }].map((m) => ({ agent: 'charts', ...m })),
      join: { agent: 'reviewer', message: 'summarise {{group.id}}' },
    });
    expect(created.status).toBe(201);
    await page.goto(server.url + '/#/groups');
    await page.locator(`[data-group="${created.body.id}"] a`).click();
    await page.getByRole('heading', { name: `Group ${created.body.id}` }).waitFor();
    expect(await page.locator('[data-member]').count()).toBe(3);
    const tree = page.getByRole('list', { name: 'group tree' });
    await expect.poll(() => tree.locator('.status').first().textContent(), { timeout: 60_000 }).toBe('failed');
    const join = page.locator('[data-join] a.mono');
    await join.waitFor({ timeout: 20_000 });
    expect(await page.locator('[data-member="1"] .status').textContent()).toBe('failed');
    expect(await page.locator('[data-join] .status').textContent()).toBe('queued');
    await shot('group');
    await join.click();
    await page.getByText(/\(its join\)/).waitFor();
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
    await page.locator('[data-spark=demo] canvas').first().waitFor();
    await page.locator('dl.history').waitFor();
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
