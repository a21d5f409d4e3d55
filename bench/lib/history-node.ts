/**
 * `baton up` for the history scenario's prune phase: the same startNode() that `baton up` calls
 * (src/cli/main.ts), in its own process, with one difference: the pruner's first sweep starts
 * BENCH_PRUNE_INTERVAL_MS (default 1,000) ± 20 % after start instead of PRUNE_INTERVAL_MS
 * (10 min), which no environment variable sets. Everything else — retention from
 * BATON_RETENTION_DAYS, the store, the loops, the HTTP server — is exactly `baton up`'s.
 */
import { startNode } from '../../src/server/up.ts';

const pruneIntervalMs = Number(process.env.BENCH_PRUNE_INTERVAL_MS ?? 1000);
const node = await startNode({ pruneIntervalMs } as Parameters<typeof startNode>[0]);
await new Promise<void>((resolve) => {
  let signals = 0;
  const onSignal = () => {
    if (++signals > 1) process.exit(130);
    node.stop().then(resolve, resolve);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
});
