import { newLeaseToken } from '../domain/ids.ts';
import type { PoolWait } from '../domain/pool-turns.ts';
import type { Tx } from '../store/adapter.ts';
import type { FastPaths, LockedPools } from '../store/fast-paths.ts';
import type { ExecutionRow } from '../store/schema.ts';

type CarriedPool = { row: LockedPools['pools'][number]; seats: { inUse: number; waits: PoolWait[] } | undefined };

/**
 * What the admissions of one gathered transaction (src/engine/admissions.ts) read once for all
 * of them and then change themselves, carried from one agent's admission to the next: the pools'
 * seats in use, waits for a turn and throttles, and the serial keys taken. FastPaths.lockAdmissions
 * reads every agent's pools before the first admission; each admission reads a pool as the read
 * found it with what the admissions before it in the transaction wrote since (the same writes, made
 * in memory too), as it would read it after their commits. The read is exact for the rest: the
 * pools are this transaction's (locked) from the read on, every admission into a pool takes its
 * lock, and what others may change meanwhile (a member's task ending, a member ending its own
 * wait) another admission may see before or after, either a valid order (src/engine/pools.ts).
 */
export class AdmissionCarry {
  private readonly pools = new Map<string, CarriedPool>();
  /**
   * Serial keys the transaction's admissions took: each agent's candidates were read before the
   * admissions before it, so a key one of them started is not yet seen running there.
   */
  readonly serials = new Set<string>();

  /** `read`, with each pool the transaction saw before as it is now (the others kept as read from now on). */
  through(read: LockedPools): LockedPools {
    const out: LockedPools = { pools: [], seats: new Map() };
    for (const p of read.pools) {
      let c = this.pools.get(p.name);
      if (!c) {
        const s = read.seats.get(p.name);
        c = { row: { ...p }, seats: s && { inUse: s.inUse, waits: [...s.waits] } };
        this.pools.set(p.name, c);
      }
      out.pools.push({ ...c.row });
      if (c.seats) out.seats.set(p.name, { inUse: c.seats.inUse, waits: [...c.seats.waits] });
    }
    return out;
  }

  /** A pool's throttle was advanced to `tat`. */
  throttled(pool: string, tat: number | null): void {
    const c = this.pools.get(pool);
    if (c) c.row.throttle_tat = tat;
  }

  /** `agent` took `n` of `pool`'s seats, and its wait there is now `wait` (null: none; undefined: as it was). */
  seated(pool: string, agent: string, n: number, wait: PoolWait | null | undefined): void {
    const s = this.pools.get(pool)?.seats;
    if (!s) return;
    s.inUse += n;
    if (wait === undefined) return;
    s.waits = s.waits.filter((w) => w.agent !== agent);
    if (wait !== null) s.waits.push(wait);
  }

  /** `agent`'s waits in `pools` were ended. */
  left(agent: string, pools: readonly string[]): void {
    for (const p of pools) {
      const s = this.pools.get(p)?.seats;
      if (s) s.waits = s.waits.filter((w) => w.agent !== agent);
    }
  }
}

/**
 * The writes of a gathered transaction's admissions that nothing after them in it reads from the
 * store (each agent's claim stamp, its admit_round, the rows it takes), made for all of them at its
 * end in one round trip (FastPaths.admitWrites). What each admission decides from them is already
 * decided and carried: its own row's seats are its own (no other admission of the transaction reads
 * them), a pool's seats are carried (AdmissionCarry: every pool of an agent that takes rows is
 * carried before it takes them), and the serial keys taken are carried.
 */
export class AdmissionWrites {
  private readonly agents = new Map<string, { stamp: number | null; round: number | null }>();
  private readonly takes: Array<{ agent: string; ids: string[]; tokens: string[]; owner: string; now: number }> = [];
  private readonly ends: Array<{ agent: string; pools: string[] }> = [];

  /** `agent`'s claim stamp at `now`. */
  stamp(agent: string, now: number): void {
    this.agents.set(agent, { round: this.agents.get(agent)?.round ?? null, stamp: now });
  }

  /** `agent`'s admit_round raised to `round`. */
  round(agent: string, round: number): void {
    this.agents.set(agent, { stamp: this.agents.get(agent)?.stamp ?? null, round });
  }

  /**
   * `agent`'s waits in `pools` end (an admission stopped before its pools): no admission after it
   * in the transaction reads the waits from the store (AdmissionCarry.left carries them).
   */
  endWaits(agent: string, pools: readonly string[]): void {
    if (pools.length > 0) this.ends.push({ agent, pools: [...pools] });
  }

  /** `agent` takes `ids` (in admission order, each with a new lease token). */
  take(agent: string, ids: string[], owner: string, now: number): void {
    if (ids.length > 0) this.takes.push({ agent, ids, tokens: ids.map(() => newLeaseToken()), owner, now });
  }

  /**
   * Write them all; the rows each agent took. Each row is the transaction's own (locked), so
   * still queued: a row found otherwise fails the transaction rather than admit fewer than the
   * limits were charged for.
   */
  async flush(tx: Tx, fast: FastPaths): Promise<Map<string, ExecutionRow[]>> {
    const agents = [...this.agents].map(([agent, w]) => ({ agent, ...w }));
    const rows =
      agents.length > 0 || this.takes.length > 0 || this.ends.length > 0
        ? await fast.admitWrites(tx, { agents, takes: this.takes, ends: this.ends })
        : [];
    const out = new Map<string, ExecutionRow[]>();
    for (const r of rows) out.set(r.agent, [...(out.get(r.agent) ?? []), r]);
    for (const t of this.takes) {
      const got = out.get(t.agent)?.length ?? 0;
      if (got !== t.ids.length) throw new Error(`admission took ${got} of the ${t.ids.length} rows it held`);
    }
    return out;
  }
}
