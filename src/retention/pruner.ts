/**
 * The pruner as a background pass: `baton up` runs `batchOnce()` on the loop helper. One pass is one batch
 * (`pruneOnce`); while a sweep has more to do, the pass asks to run again after a pause that
 * follows demand (`demandPacing`). When another writer announced work (an execution's state
 * change or a log append, through the store's signals) while the batch ran, the pause is half the
 * batch's transaction time, so the pruner holds the store at most about two thirds of the time;
 * when nothing else happened it is PRUNE_MIN_PAUSE_MS, and the next pass first waits for a quiet
 * moment (PRUNE_QUIET_MS without announcements, within that half-time pause), so the claim that
 * follows a submit does not land behind the next batch. On SQLite a batch runs on the pruner's
 * own connection in a worker thread (the event loop stays free) and commits early when a caller
 * waits for the store, so that caller waits for one chunk of ~100 executions; the next batch then
 * waits for a quiet moment for up to PRUNE_YIELD_GAP_MS. Also on SQLite, the writer's automatic
 * WAL checkpoint is set aside for the sweep (store.sweepCheckpoints) and about every PRUNE_CHECKPOINT_FRAMES
 * WAL frames the batches wrote are followed by a checkpoint on the pruner's thread (it takes no write lock: nobody
 * waits on it), inside the pause — or, after a batch that gave the store up, once things are quiet
 * again, before the next batch. After the last batch the sweep is recorded in retention_state and, on SQLite, freed pages
 * go back to the file system in small incremental-vacuum steps, paced the same way, each on the
 * pruner's thread and followed by a checkpoint there; the setting comes back after the last step,
 * or when the sweep or a step fails.
 *
 * On a store several processes share (`store.sharedByProcesses`: PostgreSQL) only the holder of the
 * `pruner` leader lease prunes (the loop is leader-only under `lease`); another process takes over
 * when it lapses (PRUNE_LEASE_MS after the holder died). On SQLite there is one process, so no
 * lease. The checkpoints and vacuum steps run where the store leaves that upkeep to the pruner
 * (`store.pruneUpkeep`: SQLite).
 */
import type { RetentionEnv } from '../config.ts';
import { LeaderLease } from '../engine/leader.ts';
import type { Lease } from '../engine/loop.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import { ArchiveWriter } from './archive.ts';
import {
  addCounts,
  pruneOnce,
  recordSweep,
  startCursor,
  zeroCounts,
  type ExecutionSelection,
  type PruneCounts,
  type PruneCursor,
  type SweepReport,
} from './prune.ts';

/** How often a sweep starts when the last one finished. Old rows wait at most this long past their window. */
export const PRUNE_INTERVAL_MS = 10 * 60_000;
/** Pause between batches, at least: other writers get the store between two batches. */
export const PRUNE_MIN_PAUSE_MS = 2;
/**
 * Pause after a batch while other work is about = its transaction time × this: the pruner then holds the
 * store ≤ ~1/(1+x) of the time. While nothing else happens the pause is PRUNE_MIN_PAUSE_MS (see `pause`).
 */
export const PRUNE_PAUSE_FACTOR = 0.5;
/**
 * Demand pacing: a pass that finds another writer's announcement younger than this waits this long
 * again (up to the pause the factor would have given): a submit's claim, or a claim's complete,
 * usually follows within a few ms, and then finds the store free instead of behind a batch.
 */
export const PRUNE_QUIET_MS = 10;
/**
 * After a batch that gave the store up to a waiting caller (SQLite), the next one waits for a
 * quiet moment for this long at most: under steady load the pruner still gets a chunk in every
 * such gap.
 */
export const PRUNE_YIELD_GAP_MS = 50;
/** The leader lease lasts this long without renewal (renewed every batch): the takeover delay after a crash. */
export const PRUNE_LEASE_MS = 60_000;
/**
 * SQLite: WAL frames (pages) a sweep lets build up before its next checkpoint. A checkpoint copies
 * every page written since the last one and syncs the file; consecutive batches write the same
 * pages of the per-agent indexes, so one copy for several batches costs less per execution (about
 * half, back to back on a long history). Counted in rows removed, at the frames per row the last checkpoint found (under
 * load more: other writers' frames, batches cut short): 4,000 frames (16 MiB) stay well
 * under the writer's own automatic checkpoint during a sweep (SWEEP_AUTOCHECKPOINT_PAGES), which
 * runs on the event loop.
 */
export const PRUNE_CHECKPOINT_FRAMES = 4_000;
/** Pages per SQLite incremental-vacuum step (4 KiB each): a step short enough to hold the store only briefly. */
export const VACUUM_STEP_PAGES = 512;

export interface PrunerOptions {
  store: StoreAdapter;
  settings: RetentionEnv;
  nodeId: string;
  /** Default the store's clock (StoreAdapter.now). */
  clock?: () => number;
  batchSize?: number;
  /** Default PRUNE_PAUSE_FACTOR. */
  pauseFactor?: number;
  /**
   * Pace by demand: the long pause only when another execution changed state (any process: the
   * store's `execution` and `log` signals) since the batch began; otherwise the minimum. False:
   * always the long pause. Default true: on a long history it keeps a sweep's cost to
   * submits and claims lower on PostgreSQL. On SQLite it was off while batches ran on the event loop
   * (a busier pruner put more requests behind a batch); since they run on a thread
   * of their own and give the store up to a waiting caller, it is on there too.
   */
  demandPacing?: boolean;
  /** SQLite: WAL frames between two checkpoints of a sweep (default PRUNE_CHECKPOINT_FRAMES). */
  checkpointFrames?: number;
  /** Called when a sweep ends (logging). */
  onSweep?: (report: SweepReport) => void;
}

type Stage =
  | { kind: 'idle' }
  | {
      kind: 'sweep';
      cursor: PruneCursor;
      selected?: Promise<ExecutionSelection>;
      startedAt: number;
      t0: number;
      counts: PruneCounts;
      batches: number;
      maxTx: number;
      txMs: number;
      /** SQLite: rows removed since the last checkpoint (their pages are in the WAL). */
      uncheckpointed: number;
      /** SQLite: WAL frames per row removed, as the last checkpoint found them. */
      framesPerRow: number;
      checkpoints: number;
      maxCheckpoint: number;
      checkpointMs: number;
      /** Demand pacing: how much longer the gap after the last step may grow while others are busy (ms). */
      gapLeft: number;
    }
  | { kind: 'vacuum' };
type Sweep = Extract<Stage, { kind: 'sweep' }>;

export class Pruner {
  private stage: Stage = { kind: 'idle' };
  /** A store shared by processes: the `pruner` leader lease (renewed before every batch); losing it drops the sweep in progress. */
  readonly lease: Lease | undefined;
  private readonly archive: ArchiveWriter | undefined;
  private readonly clock: () => number;
  private readonly demandPacing: boolean;
  private readonly checkpointFrames: number;
  /** performance.now() of the last state change or log append another writer announced (demand pacing). */
  private lastWorkAt = -Infinity;
  private unwatch: (() => void) | undefined;

  constructor(private readonly o: PrunerOptions) {
    this.clock = o.clock ?? (() => o.store.now());
    this.demandPacing = o.demandPacing ?? true;
    this.checkpointFrames = o.checkpointFrames ?? PRUNE_CHECKPOINT_FRAMES;
    const leader = o.store.sharedByProcesses ? new LeaderLease(o.store, 'pruner', o.nodeId, PRUNE_LEASE_MS, this.clock) : undefined;
    this.lease = leader && {
      acquire: async () => {
        const held = await leader.acquire();
        if (!held && this.stage.kind === 'sweep') await o.store.sweepCheckpoints(false);
        if (!held) {
          this.stage = { kind: 'idle' };
          this.watchWork(false);
        }
        return held;
      },
      release: () => leader.release(),
    };
    this.archive = o.settings.archiveDir ? new ArchiveWriter(o.settings.archiveDir) : undefined;
  }

  get enabled(): boolean {
    return this.o.settings.retentionDays > 0 || this.o.settings.auditRetentionDays > 0;
  }

  /** One pass as one call, taking the lease first when there is one (tests, benchmarks). */
  async pass(): Promise<{ nextInMs?: number; report?: SweepReport }> {
    if (!this.enabled || (this.lease && !(await this.lease.acquire()))) return {};
    return this.batchOnce();
  }

  /** The pruner pass (its loop holds `lease`): a batch of the current sweep (starting one if due), or a vacuum step. */
  async batchOnce(): Promise<{ nextInMs?: number; report?: SweepReport }> {
    if (!this.enabled) return {};
    if (this.stage.kind === 'vacuum') {
      try {
        const t0 = performance.now();
        const left = await this.o.store.reclaimSpace(VACUUM_STEP_PAGES);
        const stepMs = performance.now() - t0;
        // The pages the step moved go to the database file on the pruner's thread, as after a batch.
        await this.o.store.checkpoint();
        if (left > 0) return { nextInMs: this.pause(stepMs) };
      } catch (err) {
        this.stage = { kind: 'idle' };
        await this.o.store.sweepCheckpoints(false).catch(() => undefined);
        throw err;
      }
      this.stage = { kind: 'idle' };
      await this.o.store.sweepCheckpoints(false);
      return {};
    }
    if (this.stage.kind === 'idle') {
      this.stage = {
        kind: 'sweep',
        cursor: startCursor(),
        startedAt: this.clock(),
        t0: performance.now(),
        counts: zeroCounts(),
        batches: 0,
        maxTx: 0,
        txMs: 0,
        uncheckpointed: 0,
        framesPerRow: 1,
        checkpoints: 0,
        maxCheckpoint: 0,
        checkpointMs: 0,
        gapLeft: 0,
      };
    }
    const s = this.stage;
    try {
      // Demand pacing: another writer announced something a moment ago (a submit is often followed
      // by a claim within a few ms): wait for a quiet moment, within the pause the old rule gave.
      // (Waited here, not as a pass of its own: on PostgreSQL every pass renews the leader lease.)
      while (s.gapLeft > 0 && performance.now() - this.lastWorkAt < PRUNE_QUIET_MS) {
        const wait = Math.min(PRUNE_QUIET_MS, s.gapLeft);
        s.gapLeft -= wait;
        await new Promise((r) => setTimeout(r, wait));
      }
      s.gapLeft = 0;
      const passStarted = performance.now();
      if (s.batches === 0) {
        this.watchWork(true);
        await this.o.store.sweepCheckpoints(true);
      }
      await this.checkpoint(s);
      const batch = await pruneOnce({
        store: this.o.store,
        settings: this.o.settings,
        now: s.startedAt,
        cursor: s.cursor,
        selected: s.selected,
        archive: this.archive,
        batchSize: this.o.batchSize ?? this.o.store.pruneBatch,
      });
      s.counts = addCounts(s.counts, batch);
      s.batches++;
      s.maxTx = Math.max(s.maxTx, batch.txMs);
      s.txMs += batch.txMs;
      s.cursor = batch.next;
      s.selected = batch.prefetched;
      // SQLite: the pages the batches wrote go from the WAL to the database file about every
      // checkpointFrames frames, during the pause that follows — or, after a batch that gave the
      // store up to a waiting caller, once things are quiet again, before the next batch, so the
      // copy and its sync do not compete with what came.
      if (batch.txMs > 0 && this.o.store.pruneUpkeep)
        s.uncheckpointed += Math.max(1, batch.executions + batch.audit + batch.violations + batch.alerts);
      const checkpointMs = batch.yielded ? 0 : await this.checkpoint(s);
      // The next batch was read during this one's transaction: the pause is the store's to others.
      if (batch.next.phase !== 'done') {
        if (batch.txMs === 0) return { nextInMs: 0 };
        const pause = this.pause(batch.txMs, s.selected ? 0 : batch.readMs, passStarted, s, batch.yielded);
        return { nextInMs: Math.max(PRUNE_MIN_PAUSE_MS, Math.round(pause - checkpointMs)) };
      }
    } catch (err) {
      this.stage = { kind: 'idle' };
      this.watchWork(false);
      // The writer's automatic checkpoint comes back whatever failed (a failure here too leaves the backstop bound).
      await this.o.store.sweepCheckpoints(false).catch(() => undefined);
      const report = this.report(s);
      await recordSweep(this.o.store, report, String((err as Error)?.message ?? err).slice(0, 500)).catch(() => undefined);
      throw err;
    }
    this.watchWork(false);
    const report = this.report(s);
    const removed = report.executions + report.audit + report.violations + report.alerts;
    // SQLite: the freed pages go back to the file system in vacuum steps, and the writer's automatic
    // checkpoint stays set aside until the last of them (each is checkpointed as a batch is); the
    // last batch's pages are checkpointed first when it gave the store up before its own checkpoint.
    const vacuum = removed > 0 && this.o.store.pruneUpkeep;
    if (vacuum) await this.checkpoint(s, true);
    else await this.o.store.sweepCheckpoints(false);
    this.stage = vacuum ? { kind: 'vacuum' } : { kind: 'idle' };
    await recordSweep(this.o.store, report);
    this.o.onSweep?.(report);
    return vacuum ? { nextInMs: PRUNE_MIN_PAUSE_MS, report } : { report };
  }

  /**
   * SQLite, once the batches since the last one wrote about checkpointFrames (`all`: any): one PASSIVE checkpoint on
   * the pruner's thread, without the write lock (nobody waits on it). After the next batch's reads on the reader thread: a read in an older
   * snapshot keeps a checkpoint from copying the frames after it, and the WAL from starting over
   * at its beginning. (A batch that gave the store up carries the next selection in its rest.)
   */
  private async checkpoint(s: Sweep, all = false): Promise<number> {
    const rows = s.uncheckpointed;
    if (rows === 0 || (!all && rows * s.framesPerRow < this.checkpointFrames)) return 0;
    s.uncheckpointed = 0;
    const next = await s.selected?.catch(() => undefined);
    await next?.after?.catch(() => undefined);
    const t0 = performance.now();
    const frames = await this.o.store.checkpoint();
    // A WAL that started over since holds only part of the frames (a floor keeps the estimate live).
    if (frames > 0) s.framesPerRow = Math.max(0.05, frames / rows);
    const ms = performance.now() - t0;
    s.checkpoints++;
    s.maxCheckpoint = Math.max(s.maxCheckpoint, ms);
    s.checkpointMs += ms;
    return ms;
  }

  /**
   * Time to leave the store to others after holding it `busyMs`; the batch's own `readMs` before that
   * counts. With demand pacing, the minimum when no other writer announced anything since `since`
   * (the pass began): nobody is waiting, and one who comes waits for one batch at most, as before.
   */
  private pause(busyMs: number, readMs = 0, since = -Infinity, s?: { gapLeft: number }, yielded = false): number {
    const long = Math.max(PRUNE_MIN_PAUSE_MS, Math.round(busyMs * (this.o.pauseFactor ?? PRUNE_PAUSE_FACTOR) - readMs));
    if (!this.demandPacing) return long;
    if (yielded) {
      // Someone was waiting for the store: it is theirs until things are quiet again (what came
      // is usually followed by more — a submit by its claim — within a few ms), for a while at most.
      if (s) s.gapLeft = Math.max(long, PRUNE_YIELD_GAP_MS) - PRUNE_QUIET_MS;
      return PRUNE_QUIET_MS;
    }
    if (this.lastWorkAt >= since) return long;
    if (s) s.gapLeft = long - PRUNE_MIN_PAUSE_MS;
    return PRUNE_MIN_PAUSE_MS;
  }

  /** Demand pacing: note other writers' announcements while a sweep runs. */
  private watchWork(on: boolean): void {
    this.unwatch?.();
    this.unwatch = undefined;
    if (!on || !this.demandPacing) return;
    const seen = () => {
      this.lastWorkAt = performance.now();
    };
    const offExecution = this.o.store.subscribe('execution', seen);
    const offLog = this.o.store.subscribe('log', seen);
    this.unwatch = () => {
      offExecution();
      offLog();
    };
  }

  private report(s: Sweep): SweepReport {
    return {
      ...s.counts,
      started_at: s.startedAt,
      completed_at: this.clock(),
      duration_ms: performance.now() - s.t0,
      batches: s.batches,
      max_tx_ms: s.maxTx,
      tx_ms: s.txMs,
      checkpoints: s.checkpoints,
      max_checkpoint_ms: s.maxCheckpoint,
      checkpoint_ms: s.checkpointMs,
    };
  }
}
