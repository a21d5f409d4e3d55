/**
 * WAL checkpoints of a SQLite store off the event loop (sqlite.ts): the bounds of the writer's own
 * automatic checkpoint, and the timer that checkpoints on the writer thread instead.
 */

/**
 * The writer's automatic checkpoint while the pruner sweeps (adapter.ts, sweepCheckpoints): a
 * backstop only — it runs inside a commit on the event loop. The pruner checkpoints on its own
 * thread about every PRUNE_CHECKPOINT_FRAMES frames, and those checkpoints keep up (they copy every
 * frame), but the WAL starts over only when a writer begins while no reader still uses it, and
 * with requests reading and writing beside the batches it often does not: in a long sweep under
 * steady load the WAL grew to tens of thousands of frames between two restarts, and a backstop
 * of that order then ran every second or so, each time a long step on the event loop; a lower
 * one tripped even under lighter load. So the bound is 400 MiB of 4 KiB pages: reached only if the pruner's steps stop.
 */
export const SWEEP_AUTOCHECKPOINT_PAGES = 100_000;

/**
 * The writer connection's automatic checkpoint, a backstop (pages of 4 KiB): checkpoints run on the
 * pruner's worker thread instead (BACKGROUND_CHECKPOINT_MS), where copying pages back into the
 * database file and syncing it holds nothing but that thread. SQLite's default, 1,000, runs the
 * checkpoint inside the commit that takes the WAL past it, on the event loop, where it was most of
 * the time a busy writer spent in COMMIT. Reached only if the background checkpoints stop, or while
 * a long read holds the WAL open (then there is little left for it to copy: the thread copied up to
 * the reader's snapshot already).
 */
export const WRITER_AUTOCHECKPOINT_PAGES = 40_000;
/**
 * How often the worker thread checkpoints the WAL, when something was committed since the last time.
 * A pass copies the newest version of every page written since the one before and syncs the WAL
 * and the database file: under steady writes the same pages (the last leaves of the tables and
 * their indexes, the agents' counters) are written again and again between passes, and one copy
 * and one pair of syncs cover all of those writes: the rarer the passes, the less they cost the
 * process per write. A checkpoint is not durability (a commit is durable in the WAL): a longer wait
 * leaves only more frames to copy at the next pass, which checks the WAL's bound (WAL_RESTART_FRAMES).
 */
export const BACKGROUND_CHECKPOINT_MS = 1000;
/**
 * The WAL length (frames) at which a background checkpoint also lets the WAL start over. SQLite
 * starts it over only when a writer begins with every frame copied, and under steady writes the
 * thread's checkpoint never gets there: the main connection commits new frames while it copies. So
 * past this length a second checkpoint copies the rest while it holds the main connection's turn
 * (groups wait asynchronously; the event loop goes on), and the next group's first write starts the
 * WAL over. Without it the WAL grew to the writer's backstop, whose checkpoint then ran inside a
 * commit on the event loop, with its two fsyncs.
 */
export const WAL_RESTART_FRAMES = 16_000;

/** What the background checkpoints have done since the store opened. */
export interface CheckpointStats {
  /** Checkpoints run on the worker thread because something was committed. */
  runs: number;
  /** The WAL's length in frames at the last of them. */
  lastFrames: number;
  /** Of those, the ones that held the main connection's turn to copy the rest (WAL_RESTART_FRAMES). */
  held: number;
  /**
   * The most frames any checkpoint of the passes found (each pass runs up to five). The WAL starts
   * over only once a checkpoint has copied every frame, and that checkpoint found them all: the
   * WAL file's length is this many frames, unless the writer's backstop checkpointed
   * (WRITER_AUTOCHECKPOINT_PAGES) or a pass is still to find the frames of the latest commits.
   */
  mostFrames: number;
}

export interface BackgroundCheckpointOptions {
  everyMs: number;
  walRestartFrames: number;
  /** Transactions committed so far, by any path: a pass with none new since the last does nothing. */
  commits(): number;
  /** True while a prune sweep checkpoints in its own pauses (sweepCheckpoints). */
  sweeping(): boolean;
  /** One PASSIVE checkpoint on the writer thread; resolves with the WAL's length in frames. */
  checkpoint(): Promise<number>;
  /** Run `fn` holding the main connection's turn. */
  holdingTurn<T>(fn: () => Promise<T>): Promise<T>;
}

/**
 * Checkpoints off the event loop (WRITER_AUTOCHECKPOINT_PAGES): each pass of a timer, if anything
 * was committed since the last, runs a PASSIVE checkpoint on the worker thread.
 */
export class BackgroundCheckpoints {
  readonly stats: CheckpointStats = { runs: 0, lastFrames: 0, held: 0, mostFrames: 0 };
  private running: Promise<void> | undefined;
  private committedAtLast = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly o: BackgroundCheckpointOptions) {
    this.timer = setInterval(() => this.tick(), o.everyMs).unref();
  }

  private tick(): void {
    // A prune sweep checkpoints in its own pauses (sweepCheckpoints): one here would make its
    // next batch, which holds the main connection's turn, wait for the thread.
    const commits = this.o.commits();
    if (this.running || this.o.sweeping() || commits === this.committedAtLast) return;
    this.committedAtLast = commits;
    this.running = this.pass()
      .then((frames) => {
        this.stats.runs++;
        this.stats.lastFrames = frames;
      })
      // A failed checkpoint loses nothing (the WAL keeps the pages); the next pass tries again.
      .catch(() => undefined)
      .finally(() => (this.running = undefined));
  }

  /**
   * One pass of the timer; returns the WAL's length in frames. Past walRestartFrames the WAL should
   * start over, which needs every frame copied when a writer begins: catch up first without holding
   * anything (each pass copies what the writer committed during the one before), then copy the rest
   * holding the main connection's turn (WAL_RESTART_FRAMES).
   */
  private async pass(): Promise<number> {
    let log = await this.checkpoint();
    if (log < this.o.walRestartFrames) return log;
    // At most three more passes, while each finds a fair amount (256 frames, 1 MiB) added meanwhile.
    for (let pass = 0; pass < 3; pass++) {
      const next = await this.checkpoint();
      const added = next - log;
      log = next;
      if (added < 256) break;
    }
    this.stats.held++;
    return this.o.holdingTurn(() => this.checkpoint());
  }

  /** One checkpoint, its frames counted in the stats (CheckpointStats.mostFrames). */
  private async checkpoint(): Promise<number> {
    const frames = await this.o.checkpoint();
    this.stats.mostFrames = Math.max(this.stats.mostFrames, frames);
    return frames;
  }

  /** No more passes. */
  stop(): void {
    clearInterval(this.timer);
  }

  /** Resolves when the pass under way, if any, has ended. */
  async settled(): Promise<void> {
    await this.running;
  }
}
