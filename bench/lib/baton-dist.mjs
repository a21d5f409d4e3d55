// `baton` as an installed package runs it: the JavaScript in dist/ (bench/lib/server.ts brings it
// up to date with src/ before starting this).
const { main } = await import('../../dist/cli/main.js');
const code = await main(process.argv);
process.exitCode = code;
