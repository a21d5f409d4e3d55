#!/usr/bin/env node
// The `baton` command. In a checkout (src/ is here) it runs the TypeScript through tsx's loader,
// so what you read is exactly what runs, with no build step. An installed package has no src/:
// it runs the JavaScript that `npm run build` compiled into dist/ at pack time. (The suite starts
// its own compiled dist/ instead: test/helpers/baton.js.)
import { existsSync } from 'node:fs';

const source = new URL('../src/cli/main.ts', import.meta.url);
let main;
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import(source.href));
} else {
  ({ main } = await import('../dist/cli/main.js'));
}
const code = await main(process.argv);
// `up` and `worker` keep running until a signal; everything else exits with its code.
process.exitCode = code;
