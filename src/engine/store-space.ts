import { randomBytes } from 'node:crypto';
import type { StoreAdapter } from '../store/adapter.ts';
import { isStoreFull } from '../store/unavailable.ts';
import type { EngineEvents } from './events.ts';

/**
 * While the store is full, one probe write at most this often (asked by GET /readyz, /metrics and
 * every write this process commits), so readiness comes back by itself once space returns, even
 * when a load balancer sends no traffic meanwhile. Shorter writes a MiB more often on a full disk;
 * longer keeps a recovered node out of rotation longer.
 */
export const SPACE_PROBE_EVERY_MS = 1_000;

/**
 * What the probe writes, in bytes of incompressible text. A small write can still fit on a disk
 * that refuses every submit (a page with room, a WAL already allocated), so a small write that
 * commits does not mean space is back: readiness would flap while each submit failed. A MiB is
 * more than most writes, and small enough to write once a second while full.
 */
export const SPACE_PROBE_BYTES = 1024 * 1024;

/** The name of the leader_leases row the probe writes: never a lease (it is always lapsed). */
const PROBE_ROW = 'store-space-probe';

/**
 * Whether the store's disk is full, as this process last found it: set by a write that failed
 * for lack of space (an API request's or a background pass's), cleared when a probe write of
 * SPACE_PROBE_BYTES commits. Emits `store:full` for each such failure and `store:space` when
 * space is back.
 */
export class StoreSpace {
  private since: number | undefined;
  private lastProbe = 0;
  private probing: Promise<void> | undefined;

  constructor(
    private readonly store: StoreAdapter,
    private readonly events: EngineEvents,
    private readonly nodeId: string,
    private readonly clock: () => number,
  ) {
    events.on('loop:error', ({ error }) => this.failed(error));
    events.on('execution:changed', ({ local }) => {
      if (local && this.since !== undefined) void this.probe();
    });
  }

  /** When the store was first found full, while it is; undefined when it is not known to be. */
  get fullSince(): number | undefined {
    return this.since;
  }

  /** Note an error a write met: true (and the store marked full) when it was the disk being full. */
  failed(err: unknown): boolean {
    if (!isStoreFull(err)) return false;
    const first = this.since === undefined;
    if (first) this.since = this.clock();
    const e = err as { code?: unknown; message?: unknown };
    this.events.emit('store:full', { code: String(e.code), message: String(e.message ?? ''), first });
    return true;
  }

  /** While full, write SPACE_PROBE_BYTES (at most once per SPACE_PROBE_EVERY_MS) to learn whether space is back. */
  async probe(): Promise<void> {
    if (this.since === undefined) return;
    if (this.probing) return this.probing;
    const now = this.clock();
    if (now - this.lastProbe < SPACE_PROBE_EVERY_MS) return;
    this.lastProbe = now;
    this.probing = this.writeProbe()
      .then(
        () => this.cleared(),
        (err: unknown) => void this.failed(err),
      )
      .finally(() => (this.probing = undefined));
    return this.probing;
  }

  /** The probe: a MiB committed, then given back (a second, small write). */
  private async writeProbe(): Promise<void> {
    const put = (owner: string) =>
      this.store.transaction(async (tx) => {
        await tx
          .insertInto('leader_leases')
          .values({ name: PROBE_ROW, owner, expires_at: 0 })
          .onConflict((oc) => oc.column('name').doUpdateSet({ owner, expires_at: 0 }))
          .execute();
      });
    await put(randomBytes(SPACE_PROBE_BYTES / 2).toString('hex'));
    await put(this.nodeId);
  }

  private cleared(): void {
    if (this.since === undefined) return;
    const fullForMs = this.clock() - this.since;
    this.since = undefined;
    this.events.emit('store:space', { fullForMs });
  }
}
