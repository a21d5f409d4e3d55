/**
 * The worker's one claim loop (src/worker/sdk.ts): one long-poll claim out at a time for all the
 * agents it serves, each agent asking for its free slots (POST /v1/claim; one agent alone uses
 * its own route, POST /v1/agents/{agent}/claim). A worker serving 100 agents keeps one claim and
 * one connection parked, not 100.
 *
 * When an agent gets a free slot that the claim out does not ask for (it was full when the claim
 * left, and a completion's claim found nothing for it), the loop adds the agent to that claim
 * while it waits (POST /v1/claim/widen, with the `claim_id` the claim was sent with; the agents
 * freed in one turn of the event loop go in one request), so a claim stays parked for every free
 * slot. The slots are promised to the claim before the request leaves, and stay promised until
 * the claim answers: its answer may bring their tasks whatever becomes of the request, and never
 * more than they can run.
 *
 * A widening that does not take (the claim is answering, waits in another server process behind
 * a balancer, or the request overtook it; or a server without the route) falls back to
 * withdrawing the claim: the loop asks the server to end its wait (POST /v1/claim/withdraw), waits
 * for its answer, and claims again with every agent's free slots. The claim's connection is
 * never cut for this: a claim answers normally, with the tasks a look already begun took, so no
 * task is leased to an answer nobody reads. The server passes a withdrawal on to its other
 * processes on the same database; one that finds nothing anywhere (the answer is on its way)
 * changes nothing: the answer comes as it would have, at the latest when its wait ends.
 *
 * stop() withdraws the same way and cuts the connection only if no answer came within
 * STOP_CUT_MS (a server that went away): tasks in an answer that arrives are released at once.
 *
 * A server without POST /v1/claim (older than this SDK) answers its first claim 404 `no route`:
 * the loop then gives way to one loop per agent over the agent's own route, as the SDK claimed
 * before that route existed (perAgent), for the rest of the worker's life.
 */
import { randomUUID } from 'node:crypto';
import type { BatonClient, Task as TaskView } from '../client.ts';
import { CLAIM_ANY } from '../domain/batch.ts';
import type { WorkerEvent } from './events.ts';
import type { Lane } from './lane.ts';
import { backoffMs, isRouteMissing, isTransient, sleep } from './retry.ts';

/** Most tasks one claim asks for per agent (the API's bound on `max`). */
export const CLAIM_MAX = CLAIM_ANY.maxPerAgent;

/**
 * After stop() withdrew the claim out, how long its answer gets before the connection is cut. A
 * server that answers withdraws at once; one that does not answer at all has gone, and a cut then
 * strands nothing that a wait would save.
 */
const STOP_CUT_MS = 2_000;

/**
 * A withdrawal that found no claim waiting is sent again after these delays while the claim is
 * still out: it may have overtaken the claim on its way to the server.
 */
const WITHDRAW_RETRIES_MS = [50, 500, 5_000];

export interface ClaimLoopOptions {
  client: BatonClient;
  workerId: string;
  waitSeconds: number;
  /** Aborts on stop(). */
  stop: AbortSignal;
  /** Start (or, when stopping, release) the tasks an answer brought, in their agents' lanes. */
  start(lane: Lane, tasks: readonly TaskView[]): void;
  emit(e: WorkerEvent): void;
  /** A claim got a final answer (401, 403, 404, 409): no retry can succeed. */
  fail(err: unknown): void;
}

interface Out {
  id: string;
  asked: Map<Lane, number>;
  /** Agents promised to it this turn, for the widening sent when the turn ends. */
  adding: Array<{ agent: string; max: number }>;
  withdrawn: boolean;
  /** Cuts the claim's connection (stop() only, after STOP_CUT_MS). */
  cut: AbortController;
}

export class ClaimLoop {
  private out: Out | undefined;
  /** Wakes the loop when it waits for a free slot. */
  private idle: (() => void) | undefined;
  private readonly byAgent: Map<string, Lane>;
  /** Cleared when the server has no POST /v1/claim/widen (older than this SDK): the loop then withdraws. */
  private widens = true;
  readonly done: Promise<void>;

  constructor(
    private readonly lanes: readonly Lane[],
    private readonly o: ClaimLoopOptions,
  ) {
    this.byAgent = new Map(lanes.map((l) => [l.agent, l]));
    for (const lane of lanes) lane.onFree = () => this.freed(lane);
    o.stop.addEventListener('abort', () => this.stopping(), { once: true });
    this.done = this.run();
  }

  /** A slot of `lane` freed: wake the loop if it waits, or widen a claim that cannot fill it. */
  private freed(lane: Lane): void {
    const idle = this.idle;
    if (idle) {
      this.idle = undefined;
      return idle();
    }
    const out = this.out;
    if (out && !out.asked.has(lane) && lane.free() > 0) this.widen(out, lane);
  }

  /** Promise `lane`'s free slots to the claim out and ask the server to add them, with the others freed this turn. */
  private widen(out: Out, lane: Lane): void {
    if (out.withdrawn || this.lanes.length === 1 || this.o.stop.aborted) return;
    if (!this.widens) return this.withdraw(out);
    const max = Math.min(lane.free(), CLAIM_MAX);
    out.asked.set(lane, max);
    lane.outstanding += max;
    lane.claiming = true;
    out.adding.push({ agent: lane.agent, max });
    if (out.adding.length === 1) setImmediate(() => this.sendWidening(out));
  }

  /**
   * One widening for the agents promised to `out` this turn; where it does not take, withdraw.
   * Its slots stay promised until the claim answers (the loop then frees them with the rest).
   */
  private sendWidening(out: Out): void {
    const agents = out.adding.splice(0);
    // Answered, or being withdrawn: it asks for no more, and its answer frees the slots.
    if (this.out !== out || out.withdrawn) return;
    this.o.client.widenClaim(out.id, agents).then(
      (r) => void (r.widened || this.withdraw(out)),
      (err: unknown) => {
        if (isRouteMissing(err)) this.widens = false;
        else this.o.emit({ type: 'transport:error', op: 'widen', error: (err as Error)?.message ?? String(err), retryInMs: 0 });
        this.withdraw(out);
      },
    );
  }

  private withdraw(out: Out): void {
    if (out.withdrawn || this.lanes.length === 1) return;
    out.withdrawn = true;
    const attempt = (n: number) => {
      if (this.out !== out) return;
      this.o.client.withdrawClaim(out.id).then(
        // Not waiting yet (the withdrawal overtook the claim on its way) or its answer is on the
        // way: look again a little later while it is still out.
        (r) => void (!r.withdrawn && n < WITHDRAW_RETRIES_MS.length && setTimeout(attempt, WITHDRAW_RETRIES_MS[n], n + 1).unref()),
        // The claim still answers when its wait ends; only the new capacity waits until then.
        (err: unknown) =>
          this.o.emit({ type: 'transport:error', op: 'withdraw', error: (err as Error)?.message ?? String(err), retryInMs: 0 }),
      );
    };
    attempt(0);
  }

  private stopping(): void {
    this.idle?.();
    const out = this.out;
    if (!out) return;
    if (this.lanes.length === 1) return out.cut.abort();
    this.withdraw(out);
    setTimeout(() => out.cut.abort(), STOP_CUT_MS).unref();
  }

  private async run(): Promise<void> {
    const stop = this.o.stop;
    let failures = 0;
    let routeMissing = false;
    while (!stop.aborted) {
      const asked = new Map<Lane, number>();
      for (const lane of this.lanes) {
        const free = lane.free();
        if (free > 0) asked.set(lane, Math.min(free, CLAIM_MAX));
      }
      if (asked.size === 0) {
        // Woken by a task leaving its slot, or by stop().
        await new Promise<void>((r) => (this.idle = r));
        this.idle = undefined;
        continue;
      }
      const out: Out = { id: randomUUID(), asked, adding: [], withdrawn: false, cut: new AbortController() };
      for (const [lane, max] of asked) {
        lane.outstanding += max;
        lane.claiming = true;
      }
      this.out = out;
      let tasks: TaskView[];
      try {
        tasks = await this.send(out);
        if (failures > 0) this.o.emit({ type: 'transport:recovered', op: 'claim', failures });
        failures = 0;
      } catch (err) {
        if (stop.aborted) break;
        if (!isTransient(err)) {
          routeMissing = this.lanes.length > 1 && isRouteMissing(err);
          if (!routeMissing) this.o.fail(err);
          break;
        }
        const wait = backoffMs(failures++);
        this.o.emit({ type: 'transport:error', op: 'claim', error: (err as Error)?.message ?? String(err), retryInMs: wait });
        await sleep(wait, stop);
        continue;
      } finally {
        this.out = undefined;
        for (const [lane, max] of asked) {
          lane.outstanding -= max;
          lane.claiming = false;
        }
      }
      const byLane = new Map<Lane, TaskView[]>();
      for (const t of tasks) {
        const lane = this.byAgent.get(t.agent)!;
        const list = byLane.get(lane);
        if (list) list.push(t);
        else byLane.set(lane, [t]);
      }
      for (const [lane, list] of byLane) this.o.start(lane, list);
    }
    if (routeMissing) await this.perAgent();
  }

  /**
   * One single-agent loop per lane (each claims on POST /v1/agents/{agent}/claim), taking over
   * the lanes' free-slot calls: a server without POST /v1/claim has no withdrawal either, and a
   * single claim asks for every free slot of its agent, so none is left to withdraw for.
   */
  private async perAgent(): Promise<void> {
    await Promise.all(this.lanes.map((lane) => new ClaimLoop([lane], this.o).done));
  }

  private send(out: Out): Promise<TaskView[]> {
    const { client, workerId, waitSeconds } = this.o;
    if (this.lanes.length === 1) {
      const [[lane, max]] = [...out.asked];
      return client.claim(lane!.agent, { worker_id: workerId, wait_seconds: waitSeconds, max }, out.cut.signal);
    }
    const agents = [...out.asked].map(([lane, max]) => ({ agent: lane.agent, max }));
    return client.claimAny({ agents, worker_id: workerId, wait_seconds: waitSeconds, claim_id: out.id }, out.cut.signal);
  }
}
