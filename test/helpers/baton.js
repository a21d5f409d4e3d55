#!/usr/bin/env node
// The `baton` command the tests start: bin/baton.js's branch for an installed package (no src/),
// which runs the JavaScript in dist/. test/setup/dist.ts brings dist/ up to date with src/ before
// every `vitest run`, so this runs what src/ says, without compiling every module through tsx on
// every start. bin/baton.js's own two branches are run by the package test (installed) and by
// test/cli/bin.test.ts (a checkout).
const { main } = await import('../../dist/cli/main.js');
const code = await main(process.argv);
// `up` and `worker` keep running until a signal; everything else exits with its code.
process.exitCode = code;
