// How the differential harness (differential.ts) runs one step on its three paths.

/**
 * `fn` on every path, in PATHS order. Side by side when `together`: each path has its own store
 * and engine, and an operation only reads the shared clock (the answers and events are compared
 * after all three have ended, so the order they run in changes nothing they say). One after
 * another otherwise: an `advance` moves the shared clock once per path, as each path performs it.
 */
export async function onEveryPath<R, T>(runs: readonly R[], together: boolean, fn: (r: R) => Promise<T>): Promise<T[]> {
  if (!together) {
    const out: T[] = [];
    for (const r of runs) out.push(await fn(r));
    return out;
  }
  // Every path ends before a failure is thrown: none is left writing while the engines close.
  const settled = await Promise.allSettled(runs.map(fn));
  const failed = settled.find((s) => s.status === 'rejected');
  if (failed) throw failed.reason;
  return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
}
