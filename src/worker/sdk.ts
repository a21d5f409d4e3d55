/**
 * The TypeScript worker SDK: run tasks of one agent, or of several, over the HTTP worker protocol.
 *
 *   const worker = createWorker({ server, key, agent: 'demo', concurrency: 2, handler: async (task) => {
 *     task.log(`working on ${task.message}`);
 *     return { summary: '…' };                 // → succeeded with this result
 *   }});
 *   await worker.start();                      // throws on unknown agent, bad key, unreachable server
 *   process.on('SIGTERM', () => worker.stop()); // stop claiming, let tasks finish, release the rest
 *
 * One worker serves many agents with `agents: [...]` instead of `agent`: one client, one pool
 * of connections and one long-poll claim for them all (claim-loop.ts), each agent with its own
 * `concurrency` slots (a process serving 100 agents needs one worker, one claim loop and one set
 * of timers, not 100).
 *
 * What it does for every task: heartbeats every third of the lease TTL and aborts `task.signal`
 * when cancellation is requested, the deadline passes or the lease is lost (the lease keeper,
 * src/domain/lease.ts, shared with the push dispatcher); ships `task.log()`
 * lines in order; reports the outcome (retrying transport errors with jittered backoff). The
 * heartbeats go on after the handler returns, until the outcome (or the release) is answered:
 * a completion waiting behind a batch of others must not outlive its lease. A lost
 * lease (`409 lease_lost`) ends that task silently: another worker owns it now. So does a lease
 * that expired (on this worker's monotonic clock) without a successful renewal, say while the
 * network was cut: the server may have re-queued the task, so its run stops and is not reported.
 */
import { hostname } from 'node:os';
import { ApiError, BatonClient, type Task as TaskView } from '../client.ts';
import { LeaseKeeper } from '../domain/lease.ts';
import { redactJson } from '../domain/redact.ts';
import { CompletionBatcher } from './completions.ts';
import type { WorkerEvent } from './events.ts';
import { nodeHttpTransport } from './http.ts';
import { Lane } from './lane.ts';
import { CLAIM_MAX, ClaimLoop } from './claim-loop.ts';
import { CLAIM_ANY } from '../domain/batch.ts';
import { LogShipper } from './logs.ts';
import { decideReport, refusedOutcome, type Settled, type TaskOutcome } from './outcome.ts';
import { backoffMs, isLeaseLost, isTransient, sleep } from './retry.ts';

export { outcome, type TaskOutcome, type Usage } from './outcome.ts';
export { TaskAborted, type AbortReason } from '../domain/lease.ts';
export type { WorkerEvent } from './events.ts';
export { backoffMs, isTransient } from './retry.ts';

export interface Task {
  executionId: string;
  /** Delivery count: 2 or more means an earlier delivery may have run (de-duplicate on executionId). */
  attempt: number;
  agent: string;
  message: string;
  payload: unknown;
  /** Hard deadline (started_at + the agent's timeout). */
  deadline: Date;
  leaseTtlSeconds: number;
  /**
   * W3C trace context of the execution's trace (`00-<trace id>-<span id>-01`): start your spans
   * as its children and they join the execution's trace (docs/operations.md, "OpenTelemetry").
   */
  traceparent: string;
  /** Aborted on cancel, deadline, lease loss or shutdown; `signal.reason` is a TaskAborted. */
  signal: AbortSignal;
  /** Append a log line (streamed to the server in order while the task runs). */
  log(line: string, stream?: 'stdout' | 'stderr'): void;
}

/** A handler returns the result (→ succeeded), throws (→ failed), or returns `outcome({...})`. */
export type Handler = (task: Task) => Promise<unknown> | unknown;

/** Which agents a worker serves: one (`agent`) or several (`agents`), never neither. */
export type WorkerAgents =
  | {
      /** The agent whose tasks this worker runs. */
      agent: string;
      agents?: never;
    }
  | {
      /** Several agents served by this one worker. */
      agents: readonly string[];
      agent?: never;
    };

export type WorkerOptions = WorkerAgents & WorkerSettings;

export interface WorkerSettings {
  server: string;
  key?: string;
  /** Tasks run at once, per agent (default 1). */
  concurrency?: number;
  handler: Handler;
  /** Lease owner name (default `<host>:<pid>`). */
  workerId?: string;
  /** Long-poll wait per claim in seconds (default 20: below common 30 s proxy idle timeouts). */
  claimWaitSeconds?: number;
  /** On stop(): how long running tasks get to finish before they are aborted and released (default 30 s). */
  shutdownGraceMs?: number;
  /**
   * After a task's signal fired, how long its handler gets to return before the worker reports
   * anyway (default 10 s). A handler that ignores its signal cannot hold a lease forever.
   */
  abortWaitMs?: number;
  onEvent?: (e: WorkerEvent) => void;
}

export interface Worker {
  /** Check the agent and key (throws ApiError / Unreachable), then start claiming. */
  start(): Promise<void>;
  /** Stop claiming, give running tasks the grace period, abort and release what is left. */
  stop(): Promise<void>;
  /** Tasks running now (over every agent served). */
  readonly active: number;
  /** Resolves when the worker has stopped and every task was reported. */
  readonly done: Promise<void>;
  /**
   * Why the worker stopped on its own, if it did: a claim got a final answer (the key revoked
   * or scoped to another agent, the agent deleted or switched to push delivery), so claiming
   * again could never succeed. Running tasks were finished or released as on stop().
   */
  readonly failure: unknown;
}

/** Agents whose details start() reads at once. */
const START_READS = 8;

export function createWorker(opts: WorkerOptions): Worker {
  return new WorkerImpl(opts);
}

/** The agents a worker serves: `agent` or `agents`, exactly one of them, no name twice. */
function agentsOf(opts: WorkerOptions): string[] {
  if ((opts.agent === undefined) === (opts.agents === undefined)) throw new Error('createWorker: give `agent` or `agents`, exactly one');
  const names = opts.agent !== undefined ? [opts.agent] : [...opts.agents!];
  if (names.length === 0) throw new Error('createWorker: `agents` is empty');
  if (new Set(names).size !== names.length) throw new Error('createWorker: an agent is named twice in `agents`');
  return names;
}

class WorkerImpl implements Worker {
  private readonly client: BatonClient;
  /** Completions ready in the same turn go as one request. */
  private readonly completions: CompletionBatcher;
  private readonly concurrency: number;
  private readonly workerId: string;
  private readonly lanes: Lane[];
  private readonly loops: Promise<void>[] = [];
  private readonly stopCtrl = new AbortController();
  private starting: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private resolveDone!: () => void;
  readonly done: Promise<void>;
  failure: unknown = undefined;

  constructor(private readonly opts: WorkerOptions) {
    this.client = new BatonClient({ server: opts.server, key: opts.key, transport: nodeHttpTransport });
    this.completions = new CompletionBatcher(this.client);
    this.concurrency = Math.max(1, opts.concurrency ?? 1);
    this.lanes = agentsOf(opts).map((agent) => new Lane(agent, this.concurrency));
    this.workerId = opts.workerId ?? `${hostname()}:${process.pid}`;
    this.done = new Promise((r) => (this.resolveDone = r));
  }

  get active(): number {
    let n = 0;
    for (const lane of this.lanes) n += lane.running.size;
    return n;
  }

  private emit(e: WorkerEvent) {
    try {
      this.opts.onEvent?.(e);
    } catch {
      /* a listener's failure is not the worker's */
    }
  }

  start(): Promise<void> {
    this.starting ??= (async () => {
      // Every agent is checked before any is claimed from: a bad name fails start() with nothing taken.
      let next = 0;
      const check = async () => {
        while (next < this.lanes.length) {
          const agent = await this.readAgent(this.lanes[next++]!.agent);
          if (agent.delivery === 'push') {
            throw new Error(
              `agent '${agent.name}' uses push delivery: Baton's dispatcher POSTs its tasks to ${agent.push_url ?? 'its push_url'}; a worker would compete with it`,
            );
          }
        }
      };
      await Promise.all(Array.from({ length: Math.min(START_READS, this.lanes.length) }, check));
      // One claim loop for every agent, or one per CLAIM_ANY.maxAgents of them (a claim's bound).
      for (let i = 0; i < this.lanes.length; i += CLAIM_ANY.maxAgents) {
        const loop = new ClaimLoop(this.lanes.slice(i, i + CLAIM_ANY.maxAgents), {
          client: this.client,
          workerId: this.workerId,
          waitSeconds: this.opts.claimWaitSeconds ?? 20,
          stop: this.stopCtrl.signal,
          start: (lane, tasks) => this.startTasks(lane, tasks),
          emit: (e) => this.emit(e),
          fail: (err) => this.fail(err),
        });
        this.loops.push(loop.done);
      }
    })().catch((err) => {
      this.starting = undefined; // a start() that failed can be tried again
      throw err;
    });
    return this.starting;
  }

  /**
   * The agent this worker serves. Fatal only when the answer is final: unknown agent (404), bad
   * or revoked key (401), a key for another agent (403). A server that is down or restarting, or
   * whose database is (503, 5xx, 429, nothing listening), is waited for with backoff — a fleet
   * started before its server, or through a database restart, must not die of it.
   */
  private async readAgent(name: string) {
    for (let failures = 0; ; failures++) {
      try {
        const agent = await this.client.getAgent(name);
        if (failures > 0) this.emit({ type: 'transport:recovered', op: 'start', failures });
        return agent;
      } catch (err) {
        if (!isTransient(err) || this.stopCtrl.signal.aborted) throw err;
        const wait = backoffMs(failures);
        this.emit({ type: 'transport:error', op: 'start', error: (err as Error)?.message ?? String(err), retryInMs: wait });
        await sleep(wait, this.stopCtrl.signal);
        if (this.stopCtrl.signal.aborted) throw err;
      }
    }
  }

  stop(): Promise<void> {
    this.stopping ??= (async () => {
      try {
        this.stopCtrl.abort();
        await this.starting?.catch(() => undefined);
        await Promise.all(this.loops);
        const grace = this.opts.shutdownGraceMs ?? 30_000;
        const running = () => this.lanes.flatMap((lane) => [...lane.running.values()]);
        const all = () => Promise.all(running().map((r) => r.finished));
        const graceOver = new AbortController();
        await Promise.race([all(), sleep(grace, graceOver.signal)]);
        graceOver.abort(); // no timer left behind to hold the process open
        for (const r of running()) r.abort('shutdown');
        await all();
      } finally {
        // Whoever waits on `done` (the CLI's `baton worker`) is released even if stopping failed.
        this.resolveDone();
      }
    })();
    return this.stopping;
  }

  /** A claim got a final answer (401, 403, 404, 409): no retry can succeed. Stop as stop() would. */
  private fail(err: unknown): void {
    this.failure ??= err;
    this.emit({ type: 'error', op: 'claim', error: `${(err as Error)?.message ?? String(err)}; the worker stops` });
    void this.stop();
  }

  /** Run claimed tasks; claimed just as stop() began, they go straight back. */
  private startTasks(lane: Lane, tasks: readonly TaskView[]): void {
    for (const t of tasks) {
      if (this.stopCtrl.signal.aborted) void this.releaseTask(t);
      else this.startTask(lane, t);
    }
  }

  private async releaseTask(t: TaskView): Promise<void> {
    await this.retry('release', () => this.client.release(t.execution_id, t.lease_token), Date.now() + 30_000).catch(() => undefined);
  }

  /** Retry transient failures with jittered backoff until `untilMs`; other errors surface. */
  private async retry<T>(op: string, fn: () => Promise<T>, untilMs: number): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        if (!isTransient(err) || Date.now() >= untilMs) throw err;
        const wait = Math.min(backoffMs(attempt), Math.max(50, untilMs - Date.now()));
        this.emit({ type: 'transport:error', op, error: (err as Error)?.message ?? String(err), retryInMs: wait });
        await sleep(wait);
      }
    }
  }

  private startTask(lane: Lane, t: TaskView): void {
    const lease = new LeaseKeeper({
      leaseTtlSeconds: t.lease_ttl_seconds,
      deadlineAt: Date.parse(t.deadline_at),
      renew: () => this.client.heartbeat(t.execution_id, t.lease_token),
      isLeaseLost,
      onRenewError: (err, retryInMs) =>
        this.emit({ type: 'transport:error', op: 'heartbeat', error: (err as Error)?.message ?? String(err), retryInMs }),
      onLapse: () => this.emit({ type: 'task:lapsed', executionId: t.execution_id, leaseTtlSeconds: t.lease_ttl_seconds }),
    });
    const finished = this.runTask(lane, t, lease).then(
      (handedOver) => lane.finish(t.execution_id, handedOver),
      () => lane.finish(t.execution_id, false),
    );
    lane.running.set(t.execution_id, { abort: (reason) => lease.abort(reason), finished });
  }

  /** Runs the task and reports it; true when its completion's claim took over its slot (see complete). */
  private async runTask(lane: Lane, t: TaskView, lease: LeaseKeeper): Promise<boolean> {
    const id = t.execution_id;
    const token = t.lease_token;
    this.emit({ type: 'task:start', executionId: id, attempt: t.attempt });
    // Made on the first line: a task that logs nothing costs no shipper.
    let logs: LogShipper | undefined;
    const lost = () => lease.markLost();
    const emit = (e: WorkerEvent) => this.emit(e);
    const task: Task = {
      executionId: id,
      attempt: t.attempt,
      agent: t.agent,
      message: t.message,
      payload: t.payload,
      deadline: new Date(Date.parse(t.deadline_at)),
      leaseTtlSeconds: t.lease_ttl_seconds,
      traceparent: t.traceparent,
      get signal() {
        return lease.signal;
      },
      log: (line, stream = 'stdout') => (logs ??= new LogShipper(this.client, id, token, lost, emit)).push(stream, line),
    };

    const settled = await this.settle(task, lease);
    // The lease stays renewed until the outcome is answered (the completion can wait behind a
    // batch of others): the reaper must not re-queue a task whose result is on its way.
    lease.workDone();
    try {
      if (logs && !lease.lost) await logs.close();
      // A renewal or a log line answered lease_lost before the outcome left: another owner may
      // hold the task now, so it is not reported. Once sent, the server's answer decides.
      const report = decideReport({ settled, reason: lease.reason, leaseLost: lease.lost, deadlineAt: t.deadline_at });
      if (report.kind === 'lost') this.emit({ type: 'task:end', executionId: id, status: 'lease_lost', reported: 'lost' });
      else if (report.kind === 'release') await this.handBack(id, token);
      else return await this.complete(lane, id, token, report.outcome);
      return false;
    } finally {
      lease.stop();
    }
  }

  /** The handler's result; undefined when it has not returned abortWaitMs after the task's signal fired. */
  private settle(task: Task, lease: LeaseKeeper): Promise<Settled | undefined> {
    return new Promise<Settled | undefined>((resolve) => {
      let abortWait: NodeJS.Timeout | undefined;
      let ended = false;
      const end = (s: Settled) => {
        ended = true;
        clearTimeout(abortWait);
        resolve(s);
      };
      Promise.resolve()
        .then(() => this.opts.handler(task))
        .then(
          (value) => end({ ok: true, value }),
          (error) => end({ ok: false, error }),
        );
      // Once aborted, the handler gets abortWaitMs to return; then the worker reports anyway.
      lease.onAbort(() => {
        if (!ended) abortWait = setTimeout(() => resolve(undefined), this.opts.abortWaitMs ?? 10_000).unref();
      });
    });
  }

  /** Shutdown: give the task back to the queue (its delivery is not charged). */
  private async handBack(id: string, token: string): Promise<void> {
    try {
      await this.retry('release', () => this.client.release(id, token), Date.now() + 30_000);
    } catch (err) {
      this.emit({ type: 'error', op: 'release', error: (err as Error)?.message ?? String(err) });
    }
    this.emit({ type: 'task:end', executionId: id, status: 'queued', reported: 'released' });
  }

  /**
   * Report the outcome. A completion lands while the token is the latest one granted, even after
   * the lease lapsed: keep trying for a while before giving the task up to the reaper.
   * Recognisable secrets in the result are redacted before it leaves this process (G-04).
   *
   * Unless the worker is stopping, the completion also claims the agent's next tasks in the same
   * request: this task's slot, and any slot no other claim has asked for. The slot
   * is handed over while the request is in flight (free() does not count it), so the tasks that
   * come back start at once without overshooting the concurrency. Returns whether it was handed
   * over; the caller gives it back when the task leaves `running`.
   */
  private async complete(lane: Lane, id: string, token: string, out: TaskOutcome): Promise<boolean> {
    const claiming = !this.stopCtrl.signal.aborted;
    let max = 0;
    if (claiming) {
      lane.handedOver++;
      // While the loop's claim is out, it found the queue empty (or is about to look): the server
      // wakes it for the next task, so asking again here would only cost an empty admission.
      max = lane.claiming ? 0 : Math.min(CLAIM_MAX, Math.max(0, lane.free()));
      lane.outstanding += max;
    }
    const send = (o: TaskOutcome) =>
      this.retry(
        'complete',
        () =>
          this.completions.complete(id, {
            lease_token: token,
            status: o.status,
            result: redactJson(o.result),
            error: o.error,
            usage: o.usage as any,
            ...(max > 0 ? { claim: { worker_id: this.workerId, max } } : {}),
          }),
        Date.now() + 60_000,
      );
    try {
      let answer;
      try {
        answer = await send(out);
      } catch (err) {
        const refused = err instanceof ApiError ? refusedOutcome(err.status, err.message) : undefined;
        if (!refused) throw err;
        out = refused;
        answer = await send(out);
      }
      this.emit({ type: 'task:end', executionId: id, status: out.status, reported: 'completed' });
      if (answer.claim_error) this.emit({ type: 'error', op: 'claim', error: answer.claim_error.message });
      this.startTasks(lane, answer.tasks ?? []);
    } catch (err) {
      if (isLeaseLost(err)) this.emit({ type: 'task:end', executionId: id, status: 'lease_lost', reported: 'lost' });
      else this.emit({ type: 'error', op: 'complete', error: (err as Error)?.message ?? String(err) });
    } finally {
      lane.outstanding -= max;
    }
    return claiming;
  }
}
