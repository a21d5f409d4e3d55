import { performance } from 'node:perf_hooks';
import type Database from 'better-sqlite3';
import type { Kysely } from 'kysely';
import type { Tx } from './adapter.ts';
import type { DB } from './schema.ts';

/**
 * Bounds on one group. Every statement of a group runs synchronously inside better-sqlite3 with
 * only microtask hops between them, so a group holds the event loop from BEGIN to COMMIT, except
 * where a member gives it a turn (a bulk insert between its chunks: sqlite.ts `insertMany`; the
 * connection stays held, so no other statement runs meanwhile). The work bound is what keeps a
 * group well inside the ~50 ms budget: a group stops taking members once it has worked 10 ms
 * (dozens of submits or claims). The count only caps a burst larger than that: under batched
 * load groups grow past a few dozen members, and a higher cap ran faster than a lower one. A transaction that is long on its
 * own (the pruner, migrations) never comes through here.
 */
export interface GroupLimits {
  /** Transactions per group (default 256). */
  maxTransactions: number;
  /** Stop adding members once the group has worked this long (default 10 ms). */
  maxWorkMs: number;
}
export const GROUP_LIMITS: GroupLimits = { maxTransactions: 256, maxWorkMs: 10 };

/** What group commit has done since the store opened (tests and the benchmark read it). */
export interface GroupCommitStats {
  /** Write transactions run through `transaction()`. */
  transactions: number;
  /** COMMITs that succeeded: with grouping, usually far fewer than `transactions`. */
  commits: number;
  /** Groups begun (a failed COMMIT counts as a group, not a commit). */
  groups: number;
  largestGroup: number;
}

interface Member {
  fn: (tx: Tx) => Promise<unknown>;
  resolve(value: unknown): void;
  reject(err: unknown): void;
  /** Called once the member's own work is done, before the COMMIT (shareCommit). */
  onDone?: Array<() => void>;
}

/** The members of one BEGIN … COMMIT: those that ran, those refused (rolled back to their savepoint). */
interface Group {
  committed: Array<{ m: Member; value: unknown }>;
  refused: Array<{ m: Member; err: unknown }>;
  started: number;
}

/**
 * Group commit for SQLite's one writer: the write transactions that arrive in the same turn of
 * the event loop run as one BEGIN IMMEDIATE … COMMIT, each inside its own SAVEPOINT, so a burst
 * of N submits costs one commit (one WAL append and lock round) instead of N.
 *
 * - Members run one after another on the single connection, each alone, exactly as separate
 *   transactions did under Kysely's connection mutex: a callback that awaits something outside
 *   the transaction delays the group but never interleaves with another member's statements.
 * - A member whose callback throws is rolled back to its savepoint; the others go on. Its
 *   promise rejects with its own error.
 * - Every member's promise settles only after the shared COMMIT: callers announce after their
 *   promise resolves, so no signal ever names an uncommitted row. If the COMMIT fails, every
 *   member that would have committed gets that error.
 * - Durability is unchanged: the COMMIT is the same WAL commit with synchronous=NORMAL.
 * - A member may ask (shareCommit) that transactions its work sets off join its COMMIT: a submit
 *   wakes a claimer parked on its agent, and the claimer's admission runs after it in the same
 *   BEGIN … COMMIT, so the task is admitted without a second transaction and both answers go out
 *   after the one COMMIT (a failed COMMIT fails both).
 */
export class GroupCommit {
  readonly stats: GroupCommitStats = { transactions: 0, commits: 0, groups: 0, largestGroup: 0 };
  private queue: Member[] = [];
  private scheduled = false;
  private running: Promise<void> | undefined;
  private closed = false;
  /** The member running on the connection now (one at a time). */
  private current: Member | undefined;
  /** A member asked (shareCommit) that what its work set off may join this group's COMMIT. */
  private joinWanted = false;
  /**
   * The group's own statements, prepared once on the connection's handle and run straight on it
   * while the group holds the connection. Through Kysely each went through its query pipeline and
   * a few promise turns, a measurable share of a busy writer's time.
   */
  private readonly control: Record<'begin' | 'commit' | 'rollback' | 'savepoint' | 'release' | 'rollbackTo', Database.Statement>;

  /**
   * `held` gives the handle the members run on once the group holds the connection's turn
   * (sqlite-connection.ts, heldHandle: its statements run at once); by default, the connection
   * Kysely hands the group.
   */
  constructor(
    private readonly db: Kysely<DB>,
    private readonly raw: Database.Database,
    private readonly limits: GroupLimits = GROUP_LIMITS,
    private readonly held?: () => Kysely<DB>,
    /** Pinned for each group's BEGIN … COMMIT (sqlite-connection.ts, SchemaCookie). */
    private readonly schema?: { pin(): void; unpin(): void },
  ) {
    this.control = {
      begin: raw.prepare('BEGIN IMMEDIATE'),
      commit: raw.prepare('COMMIT'),
      rollback: raw.prepare('ROLLBACK'),
      savepoint: raw.prepare('SAVEPOINT member'),
      release: raw.prepare('RELEASE member'),
      rollbackTo: raw.prepare('ROLLBACK TO member'),
    };
  }

  run<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new Error('the store is closed'));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ fn, resolve: resolve as (v: unknown) => void, reject });
      this.schedule();
    });
  }

  /**
   * Call `fn` once the member running now has done its work (its savepoint released), before the
   * group's COMMIT; transactions `fn` starts then join that COMMIT (joinLate). Not called if the
   * member fails. Outside a member (no group is running one) nothing is called.
   */
  shareCommit(fn: () => void): void {
    const m = this.current;
    if (m) (m.onDone ??= []).push(fn);
  }

  /** Refuse new transactions; resolves once the queued ones have run (the store closes after). */
  async close(): Promise<void> {
    this.closed = true;
    while (this.running || this.queue.length > 0) {
      if (this.running) await this.running;
      else await new Promise((r) => setImmediate(r));
    }
  }

  private schedule(): void {
    if (this.scheduled || this.running) return;
    this.scheduled = true;
    // setImmediate, not a microtask: it runs after the poll phase, so every request whose I/O
    // callback ran in this turn has queued its transaction by then. Between groups the event
    // loop gets a turn, so requests keep being read while the writer is busy.
    setImmediate(() => {
      this.scheduled = false;
      this.running = this.flush().finally(() => {
        this.running = undefined;
        if (this.queue.length > 0) this.schedule();
      });
    });
  }

  /** Run one group. Never rejects: every member taken is settled, one way or the other. */
  private async flush(): Promise<void> {
    let taken: Member[] = [];
    try {
      await this.db.connection().execute(async (turn) => {
        const conn = this.held?.() ?? turn;
        taken = this.queue.splice(0, this.limits.maxTransactions);
        const ran = taken.length === 1 ? await this.runAlone(conn, taken[0]!) : await this.runGroup(conn, taken);
        // Members the work bound left out go first in the next group.
        this.queue.unshift(...taken.slice(ran));
        taken = taken.slice(0, ran);
      });
    } catch (err) {
      // The connection could not be had (the store is closing): nothing of these ran.
      for (const m of taken) m.reject(err);
    }
  }

  /** One transaction with nobody to share with: as before grouping, no savepoint (unless others join it: joinLate). */
  private async runAlone(conn: Kysely<DB>, m: Member): Promise<number> {
    this.stats.groups++;
    this.stats.transactions++;
    const g = this.begin();
    let value: unknown;
    this.current = m;
    try {
      value = await m.fn(conn as Tx);
    } catch (err) {
      this.rollback();
      m.reject(err);
      return 1;
    } finally {
      this.current = undefined;
    }
    g.committed.push({ m, value });
    this.done(m);
    if (this.joinWanted && !(await this.joinLate(conn, g))) return 1;
    this.commitAndSettle(g);
    return 1;
  }

  /** Returns how many of `batch` ran (the rest wait for the next group). */
  private async runGroup(conn: Kysely<DB>, batch: Member[]): Promise<number> {
    this.stats.groups++;
    let g: Group;
    try {
      g = this.begin();
    } catch (err) {
      // Another process holds the write lock past busy_timeout: each would have failed alone.
      for (const m of batch) m.reject(err);
      return batch.length;
    }
    let ran = 0;
    for (; ran < batch.length; ran++) {
      if (ran > 0 && performance.now() - g.started >= this.limits.maxWorkMs) break;
      if (!(await this.runMember(conn, batch[ran]!, g))) return ran + 1;
    }
    if (this.joinWanted && !(await this.joinLate(conn, g))) return ran;
    this.commitAndSettle(g);
    return ran;
  }

  private begin(): Group {
    this.joinWanted = false;
    this.control.begin.run();
    this.schema?.pin();
    return { committed: [], refused: [], started: performance.now() };
  }

  /**
   * One member in its savepoint: refused alone if it throws. False when the whole transaction
   * was lost with it; every member of `g` and `m` are then settled.
   */
  private async runMember(conn: Kysely<DB>, m: Member, g: Group): Promise<boolean> {
    this.stats.transactions++;
    this.current = m;
    try {
      this.control.savepoint.run();
      const value = await m.fn(conn as Tx);
      this.control.release.run();
      g.committed.push({ m, value });
    } catch (err) {
      if (!this.raw.inTransaction) {
        this.schema?.unpin();
        // SQLite itself ended the whole transaction (disk full, I/O error, interrupt): the
        // members before this one lost their writes with it, so they fail with its error.
        this.fail(g, err);
        m.reject(err);
        return false;
      }
      try {
        this.control.rollbackTo.run();
        this.control.release.run();
      } catch (undo) {
        this.rollback();
        this.fail(g, undo);
        m.reject(err);
        return false;
      }
      g.refused.push({ m, err });
      return true;
    } finally {
      this.current = undefined;
    }
    this.done(m);
    return true;
  }

  /** A member's work is done: what it asked to run then (shareCommit) runs now, and may start transactions that join. */
  private done(m: Member): void {
    const fns = m.onDone;
    if (!fns) return;
    m.onDone = undefined;
    this.joinWanted = true;
    for (const fn of fns) {
      try {
        fn();
      } catch {
        // The caller's wake-up, not the transaction's: the member's own work stands.
      }
    }
  }

  /**
   * Transactions that finished members set off (shareCommit) join the group before its COMMIT.
   * One turn of the event loop lets them start (the connection stays held meanwhile, so nothing
   * else runs on it); those queued by then run here, each in its savepoint, within the group's
   * bounds. False when the transaction was lost (every member settled; the late ones not run go
   * back to the queue).
   */
  private async joinLate(conn: Kysely<DB>, g: Group): Promise<boolean> {
    while (this.joinWanted) {
      this.joinWanted = false;
      const room = this.limits.maxTransactions - g.committed.length - g.refused.length;
      if (room <= 0 || performance.now() - g.started >= this.limits.maxWorkMs) return true;
      await new Promise((r) => setImmediate(r));
      const late = this.queue.splice(0, room);
      for (let i = 0; i < late.length; i++) {
        if (performance.now() - g.started >= this.limits.maxWorkMs) {
          this.queue.unshift(...late.slice(i));
          return true;
        }
        if (!(await this.runMember(conn, late[i]!, g))) {
          this.queue.unshift(...late.slice(i + 1));
          return false;
        }
      }
    }
    return true;
  }

  /** The members before a failure that ended the transaction lose their writes with it. */
  private fail(g: Group, err: unknown): void {
    for (const c of g.committed) c.m.reject(err);
    for (const r of g.refused) r.m.reject(r.err);
  }

  private commitAndSettle(g: Group): void {
    this.stats.largestGroup = Math.max(this.stats.largestGroup, g.committed.length + g.refused.length);
    let commitError: unknown;
    try {
      this.control.commit.run();
      this.stats.commits++;
    } catch (err) {
      commitError = err ?? new Error('COMMIT failed');
      this.rollback();
    }
    this.schema?.unpin();
    // Settled only now, after the COMMIT: a caller's continuation (its announce, its response)
    // must never run before its rows are durable and visible.
    for (const c of g.committed) {
      if (commitError === undefined) c.m.resolve(c.value);
      else c.m.reject(commitError);
    }
    for (const r of g.refused) r.m.reject(r.err);
  }

  private rollback(): void {
    this.schema?.unpin();
    if (!this.raw.inTransaction) return;
    try {
      this.control.rollback.run();
    } catch {
      // Nothing left to undo.
    }
  }
}
