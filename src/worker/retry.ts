/** How the worker treats a failed request: which failures are worth retrying, and how long to wait first. */
import { ApiError, Unreachable } from '../client.ts';

export const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/** Full jitter: a random wait up to the exponential step, so many workers do not retry in lockstep. */
export function backoffMs(attempt: number, baseMs = 250, maxMs = 10_000): number {
  return Math.round(Math.random() * Math.min(maxMs, baseMs * 2 ** attempt)) + 50;
}

/** Errors worth retrying: the server was unreachable, or answered 5xx/429. */
export function isTransient(err: unknown): boolean {
  if (err instanceof Unreachable) return true;
  return err instanceof ApiError && (err.status >= 500 || err.status === 429);
}

/** The server no longer knows this lease: another worker may own the task now. */
export const isLeaseLost = (err: unknown) => err instanceof ApiError && (err.code === 'lease_lost' || err.status === 404);

/**
 * The server has no such route (a server older than the SDK): its router answers 404 without
 * naming what is missing, where the API's own not_found for an unknown agent or execution names
 * it (`kind`, `id`). A proxy's 404 page (not JSON) names nothing either.
 */
export const isRouteMissing = (err: unknown) => err instanceof ApiError && err.status === 404 && err.body.kind === undefined;
