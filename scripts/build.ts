/**
 * Builds both packages for `npm pack` / `npm publish` (`npm run build`; `prepack` runs it):
 *   - the server (the root package): src/ → dist/ with tsconfig.build.json, plus the files the
 *     code loads by URL at run time (the SQL migrations, the SQLite and JSON worker threads);
 *   - the SDK (packages/sdk): what src/sdk.ts reaches → packages/sdk/dist.
 * A checkout never needs this: bin/baton.js runs the TypeScript through tsx when src/ is there
 * (the suite keeps dist/ up to date for itself: scripts/dist.ts).
 * Each output directory is emptied first, so a deleted module cannot linger in a tarball.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { RUNTIME_ASSETS } from './dist.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const at = (p: string) => root + p;
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');

function compile(project: string, outDir: string): void {
  rmSync(at(outDir), { recursive: true, force: true });
  execFileSync(process.execPath, [tsc, '-p', at(project)], { stdio: 'inherit' });
}

compile('tsconfig.build.json', 'dist');
for (const asset of RUNTIME_ASSETS) cpSync(at(`src/${asset}`), at(`dist/${asset}`), { recursive: true });
compile('packages/sdk/tsconfig.json', 'packages/sdk/dist');
