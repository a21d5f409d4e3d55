/**
 * The two ways a checkout runs `baton`: bin/baton.js (what `npm start` and a developer run) compiles
 * src/ through tsx; the command the other tests start (BATON_BIN, test/helpers/baton.js) runs the
 * compiled dist/ that test/setup/dist.ts brought up to date, and loads nothing from src/. Which
 * modules each loads is recorded by a module resolve hook (it runs on the loader's thread, so it
 * appends to a file). The installed package's bin/baton.js is the package test's.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { VERSION } from '../../src/version.ts';
import { BATON_BIN, SPAWN_TIMEOUT_MS } from '../helpers/process.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'baton-bin-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** `node <bin> --version`: its stdout and the URLs of the checkout's modules it loaded. */
async function version(bin: string): Promise<{ stdout: string; loaded: string[] }> {
  const hooks = join(work, 'hooks.mjs');
  writeFileSync(
    hooks,
    "import { appendFileSync } from 'node:fs';\nexport async function resolve(specifier, context, next) {\n  const r = await next(specifier, context);\n  appendFileSync(process.env.LOADS_FILE, r.url + '\\n');\n  return r;\n}\n",
  );
  const register = join(work, 'register.mjs');
  writeFileSync(register, `import { register } from 'node:module';\nregister(${JSON.stringify('file://' + hooks)});\n`);
  const file = join(work, `loads-${Date.now()}.txt`);
  writeFileSync(file, '');
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', register, bin, '--version'], {
    cwd: ROOT,
    env: { ...process.env, LOADS_FILE: file },
    timeout: SPAWN_TIMEOUT_MS,
  });
  const root = 'file://' + ROOT;
  const loaded = readFileSync(file, 'utf8')
    .split('\n')
    .filter((u) => u.startsWith(root) && !u.startsWith(root + 'node_modules/'))
    .map((u) => u.slice(root.length));
  return { stdout, loaded: [...new Set(loaded)] };
}

describe('bin/baton.js in a checkout', () => {
  it('runs src/ through tsx', async () => {
    const { stdout, loaded } = await version(join(ROOT, 'bin/baton.js'));
    expect(stdout.trim()).toBe(VERSION);
    expect(loaded).toContain('src/cli/main.ts');
    expect(loaded.filter((u) => u.startsWith('dist/'))).toEqual([]);
  });
});

describe("the tests' baton command", () => {
  it('runs the compiled dist/ and nothing from src/', async () => {
    const { stdout, loaded } = await version(BATON_BIN);
    expect(stdout.trim()).toBe(VERSION);
    expect(loaded).toContain('dist/cli/main.js');
    expect(loaded.filter((u) => u.startsWith('src/'))).toEqual([]);
  });
});
