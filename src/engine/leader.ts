import type { StoreAdapter } from '../store/adapter.ts';

/**
 * A leader lease over `leader_leases`: one row per background pass that one process at a time
 * should run (the pruner). Whoever holds the row until `expires_at` is the leader; it renews by
 * acquiring again before the lease lapses; a dead holder's lease lapses and the next process to
 * ask takes it over. One statement decides (an upsert whose update applies only when the row is
 * ours or lapsed), so two processes asking at once cannot both win.
 *
 * The lease is time-based, so a holder that stalls past `ttlMs` may overlap with its successor
 * for one batch: passes that use it must be safe to run twice at once (the pruner is: it deletes
 * only rows that are still there, in transactions).
 */
export class LeaderLease {
  constructor(
    private readonly store: StoreAdapter,
    readonly name: string,
    readonly owner: string,
    /** How long a grant lasts without renewal: the takeover delay after the holder dies. */
    readonly ttlMs: number,
    private readonly clock: () => number = () => store.now(),
  ) {}

  /** Take or renew the lease. True when this owner holds it until now + ttlMs. */
  async acquire(): Promise<boolean> {
    const now = this.clock();
    const row = await this.store.db
      .insertInto('leader_leases')
      .values({ name: this.name, owner: this.owner, expires_at: now + this.ttlMs })
      .onConflict((oc) =>
        oc
          .column('name')
          .doUpdateSet((eb) => ({ owner: eb.ref('excluded.owner'), expires_at: eb.ref('excluded.expires_at') }))
          .where((eb) => eb.or([eb('leader_leases.owner', '=', this.owner), eb('leader_leases.expires_at', '<', now)])),
      )
      .returning('owner')
      .executeTakeFirst();
    return row?.owner === this.owner;
  }

  /** Hand the lease on at once (clean shutdown) rather than after it lapses. */
  async release(): Promise<void> {
    await this.store.db.deleteFrom('leader_leases').where('name', '=', this.name).where('owner', '=', this.owner).execute();
  }

  /** Who holds the lease now, if anyone. */
  async holder(): Promise<{ owner: string; expires_at: number } | undefined> {
    const row = await this.store.db
      .selectFrom('leader_leases')
      .select(['owner', 'expires_at'])
      .where('name', '=', this.name)
      .executeTakeFirst();
    if (!row || Number(row.expires_at) < this.clock()) return undefined;
    return { owner: row.owner, expires_at: Number(row.expires_at) };
  }
}
