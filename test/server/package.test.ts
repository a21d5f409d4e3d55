/**
 * The two packages as a user gets them: `npm pack` both, install the tarballs into a
 * fresh project with no workspace links, then use them from there only — the SDK from plain
 * JavaScript and from TypeScript, `baton up` and the CLI from the installed server, and one task
 * run by a worker written against the installed SDK. Nothing here loads the checkout's src/.
 * The first run packs and installs (minutes: better-sqlite3 compiles); later runs and the other
 * store's project reuse the install while the sources are unchanged (test/helpers/packages.ts).
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, spawnChild, type Child } from '../helpers/process.ts';
import { importsUnder, packAndInstall, REPO, type Installed } from '../helpers/packages.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const run = promisify(execFile);
let pkg: Installed;
let work: string;
let ts: TestStore;
let server: (Child & { url: string; key: string }) | undefined;

/** This process's environment without what would steer a child: no BATON_* or npm_* variables. */
const cleanEnv = () =>
  Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(BATON_|npm_)/i.test(k))) as Record<string, string>;

/** Run `node <args>` in the consumer project, whose node_modules holds only what the tarballs installed. */
async function node(args: string[], env: Record<string, string> = {}): Promise<string> {
  const { stdout } = await run(process.execPath, args, { cwd: work, env: { ...cleanEnv(), ...env }, timeout: 60_000 });
  return stdout;
}

beforeAll(async () => {
  pkg = await packAndInstall();
  // The sqlite and postgres projects share the install: each writes its files in its own folder.
  work = join(pkg.project, STORE_KIND);
  mkdirSync(work, { recursive: true });
  ts = await openTestStore();
}, 15 * 60_000);

afterAll(async () => {
  if (server && server.proc.exitCode === null) {
    server.proc.kill('SIGTERM');
    await server.exited;
  }
  await ts?.cleanup();
});

/**
 * What does not touch a store (the tarballs' contents, the SDK loaded from JavaScript and type-checked
 * by tsc, `baton --version`) runs in one project: the sqlite project's copy would repeat the same
 * checks on the same install (the tsc check alone took 59 s a copy at a load of 17 on 2 cores).
 */
const describeOnce = STORE_KIND === 'postgres' ? describe : describe.skip;

describeOnce('the tarballs', () => {
  it('ship only what runs: compiled code, migrations, the dashboard, README, LICENSE', () => {
    const files = pkg.server.files;
    for (const f of [
      'package.json',
      'README.md',
      'LICENSE',
      'bin/baton.js',
      'dist/cli/main.js',
      'dist/index.js',
      'dist/index.d.ts',
      'dist/store/sqlite-reader-worker.js',
      'dist/engine/json-worker.js',
      'dist/store/migrations/sqlite/0100_baseline.sql',
      'dist/store/migrations/postgres/0100_baseline.sql',
      'dist/store/migrations/sqlite/legacy/0001_init.sql',
      'dist/store/migrations/postgres/legacy/0001_init.sql',
      'web/dist/index.html',
    ])
      expect(files, f).toContain(f);
    const stray = files.filter((f) => !/^(dist|bin|web\/dist)\//.test(f) && !['package.json', 'README.md', 'LICENSE'].includes(f));
    expect(stray).toEqual([]);
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
    // The server does not re-export the SDK: that is the other package.
    expect(files).not.toContain('dist/sdk.js');
    // Every migration of the checkout is in the tarball (the code finds them by URL, not by import).
    for (const folder of ['sqlite', 'postgres', 'sqlite/legacy', 'postgres/legacy'])
      for (const sql of readdirSql(folder)) expect(files).toContain(`dist/store/migrations/${folder}/${sql}`);
  });

  it('the SDK ships its dist, README and LICENSE, and depends on zod alone', () => {
    expect(pkg.sdk.files).toContain('dist/sdk.js');
    expect(pkg.sdk.files).toContain('dist/sdk.d.ts');
    expect(pkg.sdk.files.filter((f) => !f.startsWith('dist/')).sort()).toEqual(['LICENSE', 'README.md', 'package.json']);
    const manifest = JSON.parse(readFileSync(join(pkg.project, 'node_modules/@baton/sdk/package.json'), 'utf8')) as Record<string, unknown>;
    expect(Object.keys(manifest.dependencies as object)).toEqual(['zod']);
  });

  it("the SDK's compiled graph imports only itself, Node and zod: no server, store, config or Fastify", () => {
    const dist = join(pkg.project, 'node_modules/@baton/sdk/dist');
    const imports = importsUnder(dist);
    const outside = [...imports].filter(
      ([spec]) => !spec.startsWith('./') && !spec.startsWith('../') && !spec.startsWith('node:') && spec !== 'zod',
    );
    expect(outside).toEqual([]);
    // What was compiled is the SDK's own layers only: the agent, the wire contract, the domain.
    const compiled = (readdirSync(dist, { recursive: true }) as string[]).filter((f) => f.endsWith('.js'));
    expect(compiled).toContain('worker/sdk.js');
    expect(compiled.filter((f) => !/^(sdk|client|sse)\.js$|^(worker|domain|api\/schemas)[./]/.test(f))).toEqual([]);
  });
});

describeOnce('the installed SDK', () => {
  it('imports from plain JavaScript (ESM)', async () => {
    writeFileSync(
      join(work, 'exports.mjs'),
      "import * as sdk from '@baton/sdk';\nconsole.log(JSON.stringify({ keys: Object.keys(sdk), states: sdk.EXECUTION_STATES }));\n",
    );
    const out = JSON.parse(await node(['exports.mjs'])) as { keys: string[]; states: string[] };
    for (const name of ['createWorker', 'outcome', 'TaskAborted', 'commandRunner', 'BatonClient', 'ApiError', 'Unreachable', 'isTerminal'])
      expect(out.keys).toContain(name);
    expect(out.states).toContain('succeeded');
  });

  it('type-checks a TypeScript consumer against its declarations (tsc --noEmit)', async () => {
    writeFileSync(
      join(work, 'consumer.ts'),
      `import { BatonClient, createWorker, outcome, isTerminal, type Task, type ExecutionStatus } from '@baton/sdk';

const client = new BatonClient({ server: 'http://127.0.0.1:7070', key: 'bt_x' });
const status: ExecutionStatus = 'queued';
export const done: boolean = isTerminal(status);
export const worker = createWorker({
  server: 'http://127.0.0.1:7070',
  agent: 'demo',
  handler: async (task: Task) => {
    const id: string = task.executionId;
    return outcome({ status: 'succeeded', result: { id } });
  },
});
export const agents: Promise<{ name: string }[]> = client.listAgents();
// The declarations are real types, not any: each of these must be refused.
// @ts-expect-error 'agent' is required
createWorker({ server: 'x', handler: () => 1 });
// @ts-expect-error not an execution status
export const wrong: ExecutionStatus = 'exploded';
`,
    );
    writeFileSync(
      join(work, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          types: ['node'],
        },
        files: ['consumer.ts'],
      }),
    );
    const tsc = join(REPO, 'node_modules/typescript/bin/tsc');
    const r = await run(process.execPath, [tsc, '-p', join(work, 'tsconfig.json')], { cwd: work }).catch((e: { stdout: string }) => e);
    expect((r as { stdout: string }).stdout).toBe('');
  });
});

describe('the installed server', () => {
  it.runIf(STORE_KIND === 'postgres')('says its version, and starts its HTTP-only commands without the TypeScript sources', async () => {
    expect(existsSync(join(pkg.project, 'node_modules/baton/src'))).toBe(false);
    expect(existsSync(join(pkg.project, 'node_modules/tsx'))).toBe(false);
    const version = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string }).version;
    expect((await node([join(pkg.project, 'node_modules/.bin/baton'), '--version'])).trim()).toBe(version);
    expect((await packagesLoaded(['--version'])).filter((p) => SERVER_STACK.includes(p))).toEqual([]);
  });

  it('runs `baton up`, and a worker written against the installed SDK runs a task through it', async () => {
    // SQLite: a fresh data dir, so the installed package runs its own migrations; PostgreSQL: this file's schema.
    const env = STORE_KIND === 'postgres' ? ts.env : { BATON_DATA_DIR: mkdtempSync(join(tmpdir(), 'baton-pkg-')) };
    const port = await freePort();
    const child = spawnChild([join(pkg.project, 'node_modules/.bin/baton'), 'up'], {
      ...cleanEnv(),
      ...env,
      BATON_HOST: '127.0.0.1',
      BATON_PORT: String(port),
      BATON_LOG_LEVEL: 'warn',
    });
    const url = `http://127.0.0.1:${port}`;
    for (const until = Date.now() + 60_000; ; await new Promise((r) => setTimeout(r, 100))) {
      if (child.proc.exitCode !== null) throw new Error(`baton up exited:\n${child.output()}`);
      if (Date.now() > until) throw new Error(`baton up did not become ready:\n${child.output()}`);
      if (
        await fetch(url + '/readyz').then(
          (r) => r.ok,
          () => false,
        )
      )
        break;
    }
    const key = readFileSync(join(env.BATON_DATA_DIR!, 'admin.key'), 'utf8').trim();
    server = { ...child, url, key };

    writeFileSync(
      join(work, 'worker.mjs'),
      `import { BatonClient, createWorker, isTerminal } from '@baton/sdk';
const [server, key] = process.argv.slice(2);
const client = new BatonClient({ server, key });
await client.createAgent({ name: 'packaged' });
const { execution_id } = await client.submit('packaged', { message: 'hello from a tarball' });
const worker = createWorker({
  server, key, agent: 'packaged', claimWaitSeconds: 1,
  // A long result: the server checks it on its JSON worker thread, a file the tarball must carry.
  handler: (task) => { task.log('ran ' + task.executionId); return { echo: task.message, attempt: task.attempt, long: 'x'.repeat(300000) }; },
});
await worker.start();
let e = await client.getExecution(execution_id);
for (const until = Date.now() + 30_000; !isTerminal(e.status) && Date.now() < until; ) {
  await new Promise((r) => setTimeout(r, 100));
  e = await client.getExecution(execution_id);
}
await worker.stop();
await worker.done;
console.log(JSON.stringify({ status: e.status, result: e.result }));
`,
    );
    const outcome = JSON.parse(await node(['worker.mjs', url, key])) as { status: string; result: unknown };
    expect(outcome).toEqual({ status: 'succeeded', result: { echo: 'hello from a tarball', attempt: 1, long: 'x'.repeat(300_000) } });

    // The installed CLI talks to it too (the compiled dist/, no tsx).
    const listed = JSON.parse(
      await node([join(pkg.project, 'node_modules/.bin/baton'), 'agents', 'list', '--json'], { BATON_URL: url, BATON_API_KEY: key }),
    ) as {
      name: string;
      queued: number;
    }[];
    expect(listed.map((a) => a.name)).toEqual(['packaged']);
    // …and loads none of the server's stack for it: that is what keeps it under 250 ms (npm run bench).
    const loaded = await packagesLoaded(['agents', 'list', '--json'], { BATON_URL: url, BATON_API_KEY: key });
    expect(loaded).toContain('commander');
    expect(loaded.filter((p) => SERVER_STACK.includes(p))).toEqual([]);

    child.proc.kill('SIGTERM');
    expect(await child.exited).toBe(0);
    if (STORE_KIND === 'sqlite') rmSync(env.BATON_DATA_DIR!, { recursive: true, force: true });
  });
});

/** What an HTTP-only command must not load: it would cost hundreds of milliseconds at every start. */
const SERVER_STACK = [
  'fastify',
  'kysely',
  'better-sqlite3',
  'pg',
  '@modelcontextprotocol/sdk',
  'pino',
  'prom-client',
  '@opentelemetry/sdk-trace-node',
];

/**
 * The packages an installed `baton <args>` loads, recorded by a module resolve hook (it runs
 * on the loader's thread, so it appends to a file rather than writing to the child's stdout).
 */
async function packagesLoaded(args: string[], env: Record<string, string> = {}): Promise<string[]> {
  writeFileSync(
    join(work, 'loads-hooks.mjs'),
    "import { appendFileSync } from 'node:fs';\nexport async function resolve(specifier, context, next) {\n  const r = await next(specifier, context);\n  appendFileSync(process.env.LOADS_FILE, r.url + '\\n');\n  return r;\n}\n",
  );
  writeFileSync(join(work, 'loads.mjs'), "import { register } from 'node:module';\nregister('./loads-hooks.mjs', import.meta.url);\n");
  const file = join(work, `loads-${Date.now()}.txt`);
  writeFileSync(file, '');
  await node(['--import', './loads.mjs', join(pkg.project, 'node_modules/.bin/baton'), ...args], { ...env, LOADS_FILE: file });
  const urls = readFileSync(file, 'utf8').split('\n').filter(Boolean);
  rmSync(file);
  expect(urls.some((u) => u.endsWith('/node_modules/baton/dist/cli/main.js'))).toBe(true);
  const names = urls.map((u) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(u)?.[1]).filter((n): n is string => !!n && n !== 'baton');
  return [...new Set(names)];
}

const readdirSql = (kind: string): string[] => readdirSync(join(REPO, 'src/store/migrations', kind)).filter((f) => f.endsWith('.sql'));
