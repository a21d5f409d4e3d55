#!/usr/bin/env node
// The `baton` command. Baton ships TypeScript and runs it through tsx's loader, so the
// checkout you read is exactly what runs (no build step, no stale dist/).
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
const code = await main(process.argv);
// `up` and `worker` keep running until a signal; everything else exits with its code.
process.exitCode = code;
