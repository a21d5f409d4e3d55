/**
 * Lays the test files out like the code: every `test/<name>.test.ts` at the root of test/ moves
 * (with `git mv`) into the folder of its area, and every path that reached it or that it reached
 * is rewritten. Re-runnable: files already in a folder stay, so a second run changes nothing, and
 * a test file added later at the root is placed by the same rules.
 *
 *   node --import tsx scripts/layout-tests.ts [--dry-run]
 *
 * A file's folder comes from its name (`<area word>[.-]<more>[.<interface>].test.ts`), first rule
 * that matches wins:
 *   1. PLACED, an explicit table for names the rules would get wrong;
 *   2. cost tests (statement counts, query plans, round trips) go to test/cost/, their own vitest
 *      projects (vitest.config.ts);
 *   3. a `.cli` or `.mcp` part names the interface the file drives, so it goes there;
 *   4. otherwise the name's first word, looked up in AREAS.
 * A name no rule places stops the run before anything moves: add its word to AREAS or the
 * file to PLACED. Multi-process and crash tests stay beside their area (chains.crash → composition).
 *
 * Rewritten in a moved file: import specifiers (static and dynamic), `new URL('…', import.meta.url)`
 * and `join`/`resolve` from `import.meta.dirname` or `__dirname`. Paths a test gives relative to the
 * checkout (`test/fixtures/x.ts` run with the checkout as cwd, `bin/baton.js`) do not change.
 * Rewritten everywhere in the checkout: mentions of `test/<name>.test.ts` (docs, CI, comments).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, posix } from 'node:path';

const ROOT = join(import.meta.dirname, '..');
const TEST = 'test';
/** Folders of test/ that are not areas: shared code, child-process programs, global setup. */
const NOT_AREAS = new Set(['helpers', 'fixtures', 'setup']);

/** Exceptions to the rules, by name without `.test.ts`. */
const PLACED: Record<string, string> = {
  'fire-plan': 'triggers', // the scheduler's fire plan, not a query plan
  'backlog-sweep': 'cost', // the sweep's query plans
  'agent-rows-apart': 'cost', // the page layout and plans of agent rows on PostgreSQL
  'logs-format': 'server', // `baton up`'s own log lines, not execution logs
  'triggers.api': 'triggers', // schedules and webhooks through the API: trigger behaviour
  'api-reference': 'api',
  'schema-file': 'store',
};

/** Cost tests: what a transition costs (statements, plans, round trips), not what it does. */
const COST = /(^|[.-])(plans?|round-trips?|one-statement|statements?|statement-counts?)([.-]|$)|(^|[.-])\w+-plans?([.-]|$)|^plans?-/;

/** The interface a `.cli`/`.mcp` part names. */
const INTERFACES: Record<string, string> = { cli: 'cli', mcp: 'mcp' };

/** The first word of a name → its area (src/ folder or area of the code). */
const AREAS: Record<string, string> = {
  // src/engine: transitions, holds, the reaper, the loop, execution logs
  engine: 'engine',
  admission: 'engine',
  breaker: 'engine',
  budget: 'engine',
  budgets: 'engine',
  lapse: 'engine',
  reaper: 'engine',
  model: 'engine',
  backlog: 'engine',
  status: 'engine',
  multiprocess: 'engine',
  differential: 'engine',
  fast: 'engine',
  holds: 'engine',
  hold: 'engine',
  pause: 'engine',
  loop: 'engine',
  logs: 'engine',
  agents: 'engine',
  agent: 'engine',
  lease: 'engine',
  leases: 'engine',
  // src/store
  store: 'store',
  migrations: 'store',
  migration: 'store',
  dialects: 'store',
  schema: 'store',
  sqlite: 'store',
  postgres: 'store',
  // src/api
  api: 'api',
  hardening: 'api',
  events: 'api',
  activity: 'api',
  large: 'api',
  auth: 'api',
  sse: 'api',
  // src/canary
  canary: 'canary',
  // src/retention
  retention: 'retention',
  prune: 'retention',
  archive: 'retention',
  // src/cli
  cli: 'cli',
  doctor: 'cli',
  // src/mcp
  mcp: 'mcp',
  // src/worker
  worker: 'worker',
  // src/delivery: push agents
  push: 'delivery',
  webhooks: 'delivery',
  delivery: 'delivery',
  dispatcher: 'delivery',
  templates: 'delivery',
  // src/engine/triggers
  triggers: 'triggers',
  trigger: 'triggers',
  cron: 'triggers',
  schedules: 'triggers',
  schedule: 'triggers',
  fire: 'triggers',
  // src/engine/composition: chains, groups, subscriptions
  chains: 'composition',
  groups: 'composition',
  subscriptions: 'composition',
  composition: 'composition',
  // src/server and the shipped whole: `baton up`, config, telemetry, the package, the dashboard
  server: 'server',
  crash: 'server',
  config: 'server',
  outage: 'server',
  telemetry: 'server',
  package: 'server',
  browser: 'server',
  web: 'server',
};

/** The area folder of a test file's name (without `.test.ts`), or undefined when no rule places it. */
export function areaOf(name: string): string | undefined {
  if (PLACED[name]) return PLACED[name];
  if (COST.test(name)) return 'cost';
  const parts = name.split('.');
  for (const part of parts.slice(1)) if (INTERFACES[part]) return INTERFACES[part];
  return AREAS[name.split(/[.-]/)[0]!];
}

const isTest = (f: string) => /\.test\.tsx?$/.test(f);
const baseName = (f: string) => f.replace(/\.test\.tsx?$/, '');

/** Every test file now in an area folder, by file name → its path from the checkout. */
function placedTests(): Map<string, string> {
  const found = new Map<string, string>();
  for (const dir of readdirSync(join(ROOT, TEST))) {
    if (NOT_AREAS.has(dir) || !statSync(join(ROOT, TEST, dir)).isDirectory()) continue;
    for (const f of readdirSync(join(ROOT, TEST, dir), { recursive: true, encoding: 'utf8' })) {
      if (!isTest(f)) continue;
      const name = posix.basename(f);
      const at = posix.join(TEST, dir, f);
      if (found.has(name)) fail(`two test files named ${name}: ${found.get(name)} and ${at}`);
      found.set(name, at);
    }
  }
  return found;
}

function fail(message: string): never {
  console.error(`layout-tests: ${message}`);
  process.exit(1);
}

/** `spec` (relative, as written in a file of `fromDir`) rewritten for the same file in `toDir`. */
function moveSpec(spec: string, fromDir: string, toDir: string, moved: Map<string, string>): string {
  if (!spec.startsWith('.')) return spec;
  const target = posix.normalize(posix.join(fromDir, spec));
  const now = moved.get(target) ?? target;
  let out = posix.relative(toDir, now) || '.';
  if (spec.endsWith('/') && !out.endsWith('/')) out += '/';
  if (!out.startsWith('.')) out = './' + out;
  return out;
}

/** Rewrites the relative paths of one file that moved from `fromDir` to `toDir`. */
export function rewriteMovedFile(text: string, fromDir: string, toDir: string, moved: Map<string, string>): string {
  const fix = (spec: string) => moveSpec(spec, fromDir, toDir, moved);
  return (
    text
      // import … from '…', export … from '…', import '…'
      .replace(/(\bfrom\s+|\bimport\s+)(['"])(\.{1,2}\/[^'"]*)\2/g, (_, head, q, spec) => `${head}${q}${fix(spec)}${q}`)
      // import('…'), vi.mock('…'), require('…'), vi.importActual('…')
      .replace(
        /(\b(?:import|require|mock|doMock|importActual|importMock)\(\s*)(['"])(\.{1,2}\/?[^'"]*)\2/g,
        (_, head, q, spec) => `${head}${q}${fix(spec)}${q}`,
      )
      // new URL('…', import.meta.url)
      .replace(
        /(new URL\(\s*)(['"`])(\.{1,2}\/?[^'"`]*)\2(\s*,\s*import\.meta\.url)/g,
        (_, head, q, spec, tail) => `${head}${q}${fix(spec)}${q}${tail}`,
      )
      // join/resolve(import.meta.dirname | __dirname, '…')
      .replace(
        /(\b(?:join|resolve)\(\s*(?:import\.meta\.dirname|__dirname)\s*,\s*)(['"`])([^'"`]*)\2/g,
        (_, head, q, spec) => `${head}${q}${fix(spec.startsWith('.') ? spec : './' + spec).replace(/^\.\/(?=.)/, '')}${q}`,
      )
  );
}

/** Files of the checkout whose text may name a test file. Old migrations stay as they were written. */
function textFiles(): string[] {
  const out = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' }).split('\0');
  return out.filter(
    (f) =>
      f &&
      f !== 'scripts/layout-tests.ts' &&
      f !== 'package-lock.json' &&
      !f.startsWith('src/store/migrations/') &&
      /\.(ts|tsx|js|cjs|mjs|json|md|sql|yml|yaml|sh)$|^\.ci\/|^\.prettierignore$|^\.github\//.test(f) &&
      existsSync(join(ROOT, f)),
  );
}

function main(): void {
  const dry = process.argv.includes('--dry-run');
  const already = placedTests();
  const roots = readdirSync(join(ROOT, TEST)).filter(isTest).sort();

  const plan: { from: string; to: string }[] = [];
  const unplaced: string[] = [];
  for (const f of roots) {
    const area = areaOf(baseName(f));
    if (!area) unplaced.push(f);
    else if (already.has(f)) fail(`test/${f} would move onto ${already.get(f)}, which exists`);
    else plan.push({ from: posix.join(TEST, f), to: posix.join(TEST, area, f) });
  }
  if (unplaced.length) {
    fail(
      `no rule places ${unplaced.map((f) => `test/${f}`).join(', ')}: add its first word to AREAS or the file to PLACED in scripts/layout-tests.ts`,
    );
  }

  const moved = new Map(plan.map((m) => [m.from, m.to]));
  // Where each test file lives once this run is over, by file name: for mentions of `test/<name>`.
  const home = new Map(already);
  for (const m of plan) home.set(posix.basename(m.from), m.to);

  for (const m of plan) console.log(`${m.from} -> ${m.to}`);
  if (dry) return;

  const changed = new Set<string>();
  for (const m of plan) {
    const text = readFileSync(join(ROOT, m.from), 'utf8');
    mkdirSync(join(ROOT, posix.dirname(m.to)), { recursive: true });
    execFileSync('git', ['mv', m.from, m.to], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
    const next = rewriteMovedFile(text, posix.dirname(m.from), posix.dirname(m.to), moved);
    if (next !== text) writeFileSync(join(ROOT, m.to), next);
    changed.add(m.to);
  }
  // Relative imports between files that stay (helpers, fixtures) and a test file that moved.
  for (const f of textFiles()) {
    if (!/\.(ts|tsx|js|mjs)$/.test(f) || changed.has(f)) continue;
    const text = readFileSync(join(ROOT, f), 'utf8');
    const dir = posix.dirname(f);
    const next = text.replace(/(\bfrom\s+|\bimport\(\s*)(['"])(\.{1,2}\/[^'"]*\.test\.tsx?)\2/g, (all, head, q, spec) => {
      const target = posix.normalize(posix.join(dir, spec));
      return moved.has(target) ? `${head}${q}${moveSpec(spec, dir, dir, moved)}${q}` : all;
    });
    if (next !== text) (writeFileSync(join(ROOT, f), next), changed.add(f));
  }
  // Mentions of a root test path anywhere: docs, CI, package.json scripts, comments.
  const mention = /(?<![\w/.-])test\/([\w.-]+\.test\.tsx?)\b/g;
  for (const f of textFiles()) {
    const text = readFileSync(join(ROOT, f), 'utf8');
    const next = text.replace(mention, (all, name: string) => home.get(name) ?? all);
    if (next !== text) (writeFileSync(join(ROOT, f), next), changed.add(f));
  }

  // Longer paths can push a line past the print width; format what this run wrote.
  const formatted = [...changed].filter((f) => /\.(ts|tsx|js|cjs|mjs|json)$/.test(f));
  if (formatted.length) {
    execFileSync(process.execPath, [join(ROOT, 'node_modules/prettier/bin/prettier.cjs'), '--write', '--log-level', 'warn', ...formatted], {
      cwd: ROOT,
      stdio: 'inherit',
    });
  }
  console.log(`moved ${plan.length} test files; rewrote ${changed.size} files`);
}

if (process.argv[1] && import.meta.filename === process.argv[1]) main();
