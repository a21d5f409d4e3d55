import { readdirSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll } from 'vitest';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import type { DispatcherOptions } from '../../src/delivery/dispatcher.ts';
import { BatonClient } from '../../src/client.ts';
import type { ConnectionLimits } from '../../src/api/server.ts';
import { openTestStore, type TestStore } from './store.ts';

/** An in-process `baton up` on the test file's store (port 0), with a fast reaper. */
export async function startTestNode(
  ts: TestStore,
  opts: { dispatcher?: false | DispatcherOptions; reaperIntervalMs?: number; limits?: Partial<ConnectionLimits> } = {},
): Promise<{ node: BatonNode; key: string; api: BatonClient }> {
  const node = await startNode({
    env: ts.nodeEnv,
    logger: false,
    reaperIntervalMs: opts.reaperIntervalMs ?? 200,
    dispatcher: opts.dispatcher,
    limits: opts.limits,
  });
  const key = node.createdAdminKey ?? readFileSync(`${ts.location.dataDir}/admin.key`, 'utf8').trim();
  return { node, key, api: new BatonClient({ server: node.url, key }) };
}

/** A test file's store and the in-process `baton up` on it, with its admin key and a client as that key. */
export interface TestNode {
  ts: TestStore;
  node: BatonNode;
  api: BatonClient;
  key: string;
}

/**
 * The set-up the API and worker test files share: registers, in the calling scope, a beforeAll that
 * opens the file's store (openTestStore) and starts a node on it (startTestNode; no dispatcher unless
 * `opts` says otherwise), then hands both to `set`, and an afterAll that stops the node and cleans
 * the store up. A file's own afterAll registered after this one runs before it (Vitest runs after
 * hooks in reverse), while the node is still up.
 */
export function testNodeHooks(set: (t: TestNode) => void, opts: Parameters<typeof startTestNode>[1] = { dispatcher: false }): void {
  let ts: TestStore | undefined;
  let node: BatonNode | undefined;
  beforeAll(async () => {
    ts = await openTestStore();
    const started = await startTestNode(ts, opts);
    node = started.node;
    set({ ts, ...started });
  });
  afterAll(async () => {
    await node?.stop();
    await ts?.cleanup();
  });
}

/** Processes whose process group is `pgid`, read from /proc (state Z included: a zombie still counts). */
export function groupMembers(pgid: number): Array<{ pid: number; state: string; comm: string }> {
  const out: Array<{ pid: number; state: string; comm: string }> = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${d}/stat`, 'utf8');
    } catch {
      continue; // exited while we looked
    }
    const close = stat.lastIndexOf(')');
    const fields = stat.slice(close + 2).split(' ');
    if (Number(fields[2]) === pgid) out.push({ pid: Number(d), state: fields[0]!, comm: stat.slice(stat.indexOf('(') + 1, close) });
  }
  return out;
}

/**
 * Wait until no process of the group is left. Killed grandchildren are re-parented to PID 1, which
 * reaps them on its own schedule, so this polls (bounded) instead of asserting at one instant.
 */
export async function groupGone(pgid: number, timeoutMs = 20_000): Promise<Array<{ pid: number; state: string; comm: string }>> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const left = groupMembers(pgid);
    if (left.length === 0 || Date.now() > until) return left;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** SIGKILL a whole group if anything of it is left (test cleanup). */
export function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

export async function until<T>(
  what: string,
  fn: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  timeoutMs = 20_000,
  everyMs = 50,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as T;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
