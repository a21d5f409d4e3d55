/**
 * Push delivery. For agents with `delivery: push`, Baton is the worker: the dispatcher admits
 * queued executions with the same claim and lease as any pull worker (owner = this node), POSTs
 * each task to the agent's URL, renews the lease while the request is in flight, and records the
 * answer as the outcome. If this process dies mid-request the lease lapses, the reaper re-queues
 * the execution, and another process delivers it again with the same Idempotency-Key.
 */
import { LARGE_JSON_CHARS } from '../domain/json.ts';
import { createHmac } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { BatonErrorCode } from '../domain/error-codes.ts';
import { BatonError } from '../domain/errors.ts';
import { LeaseKeeper, type AbortReason } from '../domain/lease.ts';
import { executionTrace } from '../domain/trace.ts';
import type { Outcome } from '../domain/outcomes.ts';
import type { Engine } from '../engine/engine.ts';
import { reportLoopError } from '../engine/loop.ts';
import { mayBeCutShort } from '../engine/transitions/admit.ts';
import { iso } from '../engine/views.ts';
import { redactUrlSecretsIn } from '../domain/urls.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { interpretAnswer } from './answer.ts';

export { interpret, interpretAnswer } from './answer.ts';

export interface DispatcherOptions {
  /** Push requests in flight per process, over all agents (default 64). Each agent's cap still applies. */
  concurrency?: number;
  /** On stop(): how long in-flight requests get to finish before they are aborted and released (default 10 s). */
  shutdownGraceMs?: number;
  /** Largest response body read (default 4 MiB); a larger one fails the execution. */
  maxResponseBytes?: number;
}

/** Fallback poll of push agents' queues. Signals make dispatch immediate; this bounds a lost one. */
export const DISPATCH_POLL_MS = 1_000;

/** The engine no longer knows this lease: another owner may hold the execution now. */
const isLeaseLost = (err: unknown) => err instanceof BatonError && (err.code === 'lease_lost' || err.code === 'not_found');

interface Flight {
  id: string;
  abort(reason: AbortReason): void;
  done: Promise<void>;
}

interface PushAgent {
  name: string;
  push_url: string | null;
  push_secret: string | null;
}

export class Dispatcher {
  private readonly concurrency: number;
  private readonly maxResponseBytes: number;
  private readonly shutdownGraceMs: number;
  private readonly inflight = new Map<string, Flight>();
  private readonly httpAgent: http.Agent;
  private readonly httpsAgent: https.Agent;
  private pushAgents = new Set<string>();
  /** Agents the last pass saw with pull delivery: their queue changes are none of ours. */
  private pullAgents = new Set<string>();
  private rotate = 0;
  private pending: Promise<number> | undefined;
  private again = false;
  private stopped = false;
  private readonly off: () => void;
  private readonly actor: string;

  constructor(
    private readonly engine: Engine,
    opts: DispatcherOptions = {},
  ) {
    this.concurrency = opts.concurrency ?? 64;
    this.maxResponseBytes = opts.maxResponseBytes ?? 4 * 1024 * 1024;
    this.shutdownGraceMs = opts.shutdownGraceMs ?? 10_000;
    this.actor = `dispatcher:${engine.nodeId}`;
    // Keep-alive: one connection per request would cost more than the request on a fast agent.
    this.httpAgent = new http.Agent({ keepAlive: true, maxSockets: this.concurrency });
    this.httpsAgent = new https.Agent({ keepAlive: true, maxSockets: this.concurrency });
    // Work queued for a push agent, or a seat freed: dispatch now rather than at the next poll.
    // A pass a signal started reports its failure as the loop's own passes do.
    const signalled = () => void this.dispatchOnce().catch((error) => reportLoopError(engine.events, 'dispatcher', error));
    const onChanged = (e: { agent: string; status: string }) => {
      if (e.status === 'running') return;
      // An agent the last pass did not know (just created) may be a push agent: look.
      if (this.pushAgents.has(e.agent) || !this.pullAgents.has(e.agent)) signalled();
    };
    engine.events.on('execution:changed', onChanged);
    const offAgent = engine.subscribe('agent', signalled);
    this.off = () => {
      engine.events.off('execution:changed', onChanged);
      offAgent();
    };
  }

  /** Deliveries in flight in this process. */
  get active(): number {
    return this.inflight.size;
  }

  /**
   * Admit what push agents can take now and start delivering it. Calls that overlap a running
   * pass fold into one more pass after it. Returns how many deliveries this pass started. A
   * failed pass rejects only for the call that started it, so it is reported once.
   */
  dispatchOnce(): Promise<number> {
    if (this.stopped) return Promise.resolve(0);
    if (this.pending) {
      this.again = true;
      return this.pending.catch(() => 0);
    }
    const pass = this.pass().finally(() => {
      this.pending = undefined;
      if (this.again && !this.stopped) {
        this.again = false;
        this.dispatchOnce().catch((error) => reportLoopError(this.engine.events, 'dispatcher', error));
      }
    });
    this.pending = pass;
    return pass;
  }

  private async pass(): Promise<number> {
    const all = await this.engine.agents.deliverySettings();
    const agents: PushAgent[] = all.filter((a) => a.delivery === 'push');
    this.pushAgents = new Set(agents.map((a) => a.name));
    this.pullAgents = new Set(all.filter((a) => a.delivery !== 'push').map((a) => a.name));
    if (agents.length === 0) return 0;
    let started = 0;
    // Start from a different agent each pass, so a saturated process does not always favour the first.
    const offset = this.rotate++ % agents.length;
    for (let i = 0; i < agents.length && !this.stopped; i++) {
      const agent = agents[(offset + i) % agents.length]!;
      for (;;) {
        const free = this.concurrency - this.inflight.size;
        if (free <= 0) return started;
        let rows: ExecutionRow[];
        try {
          rows = await this.engine.claim(agent.name, { owner: this.engine.nodeId, max: free, waitMs: 0, delivery: 'push' });
        } catch (err) {
          // Deleted, or switched to pull, since this pass read the list: nothing to deliver, no fault.
          if (err instanceof BatonError && (err.code === 'not_found' || err.code === 'wrong_delivery')) break;
          throw err;
        }
        for (const row of rows) {
          this.start(row, agent);
          started++;
        }
        // A claim stops at its byte bound (CONTRACT_DEFAULTS.claimAnswerBytes): one that may have
        // stopped there is followed by another, rather than leaving the rest to the next pass.
        if (rows.length === 0 || rows.length >= free || !mayBeCutShort(rows) || this.stopped) break;
      }
    }
    return started;
  }

  private start(row: ExecutionRow, agent: PushAgent): void {
    // Renew while the request is in flight; the answer to a renewal also carries cancellation.
    // Anything but a lost lease (the store briefly unavailable) is retried by the next renewal.
    const lease = new LeaseKeeper({
      leaseTtlSeconds: row.lease_ttl_seconds,
      deadlineAt: row.deadline_at,
      now: () => this.engine.now(),
      renew: () => this.engine.heartbeat(row.id, row.lease_token!),
      isLeaseLost,
    });
    // A throw outside deliver's own handling (a corrupt stored payload, say) leaves the row running
    // until its lease lapses and the reaper re-queues it; it is reported, never left unhandled.
    const done = this.deliver(row, agent, lease)
      .catch((err) => reportLoopError(this.engine.events, 'dispatcher', err))
      .finally(() => this.inflight.delete(row.id));
    this.inflight.set(row.id, { id: row.id, abort: (reason) => lease.abort(reason), done });
    void done.finally(() => lease.stop());
  }

  private async deliver(row: ExecutionRow, agent: PushAgent, lease: LeaseKeeper): Promise<void> {
    const started = performance.now();
    let out: Outcome;
    if (!agent.push_url) {
      out = {
        status: 'failed',
        error: {
          code: 'push_url_missing' satisfies BatonErrorCode,
          message: `agent '${agent.name}' uses push delivery but has no push_url`,
        },
      };
    } else {
      const body = JSON.stringify({
        execution_id: row.id,
        attempt: row.attempt,
        agent: row.agent,
        message: row.message,
        payload: JSON.parse(row.payload),
        deadline: iso(row.deadline_at),
      });
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'user-agent': 'baton-dispatcher',
        'idempotency-key': row.id,
        'x-baton-execution-id': row.id,
        'x-baton-attempt': String(row.attempt),
        // The execution's trace (src/domain/trace.ts): the endpoint's spans join it as children.
        traceparent: executionTrace(row.id).traceparent,
      };
      if (row.deadline_at) headers['x-baton-deadline'] = iso(row.deadline_at)!;
      let secret: string | undefined;
      let unreadable: Outcome | undefined;
      try {
        secret = agent.push_secret ? this.engine.secrets.open(agent.push_secret) : undefined;
      } catch (err) {
        // Not the agent's fault and not the network's: this process's secret key is not the one
        // the secret was sealed with (processes sharing a database must share BATON_SECRET_KEY).
        // Logged, so the operator sees it, and failed with a code that says so.
        reportLoopError(this.engine.events, 'dispatcher', err);
        unreadable = {
          status: 'failed',
          error: {
            code: 'push_secret_unreadable' satisfies BatonErrorCode,
            message: `agent '${agent.name}': its push signing secret cannot be opened by this process: ${(err as Error).message}`,
          },
        };
      }
      if (unreadable) out = unreadable;
      else {
        try {
          if (secret !== undefined) headers['x-baton-signature'] = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
          const res = await this.post(agent.push_url, body, headers, lease.signal);
          // An error page may echo the request's path or query, which name no URL for the
          // stored error's redaction to find (Engine.complete): the push URL's secrets go here.
          out = await interpretAnswer(res, (text) => redactUrlSecretsIn(text, agent.push_url!));
          // A large answer was read in this turn: the completion stores it in the next.
          if (res.text.length > LARGE_JSON_CHARS) await new Promise((r) => setImmediate(r));
        } catch (err) {
          out = this.failure(err, lease.reason, started, row, agent.push_url);
        }
      }
    }
    const reason = lease.reason;
    if (reason === 'lease_lost') return; // another owner has it now: report nothing
    try {
      if (reason === 'shutdown') await this.engine.release(row.id, row.lease_token!, this.actor);
      else await this.engine.complete(row.id, row.lease_token!, out, this.actor);
    } catch (err) {
      if (!isLeaseLost(err)) reportLoopError(this.engine.events, 'dispatcher', err);
    }
  }

  private failure(err: unknown, why: AbortReason | undefined, started: number, row: ExecutionRow, url: string): Outcome {
    const secs = ((performance.now() - started) / 1000).toFixed(1);
    if (why === 'deadline') {
      return {
        status: 'failed',
        error: {
          code: 'timeout' satisfies BatonErrorCode,
          message: `push request timed out: no answer from ${where(url)} after ${secs} s (the agent's ${row.timeout_seconds} s timeout)`,
        },
      };
    }
    if (why === 'cancelled')
      return {
        status: 'cancelled',
        error: {
          code: 'cancel_requested' satisfies BatonErrorCode,
          message: `cancelled on request; the push request was aborted after ${secs} s`,
        },
      };
    if (why)
      return {
        status: 'failed',
        error: { code: 'push_aborted' satisfies BatonErrorCode, message: `push request aborted (${why}) after ${secs} s` },
      };
    const e = err as NodeJS.ErrnoException & { cause?: any };
    const code = e?.code ?? e?.cause?.code;
    const text = redactUrlSecretsIn((e?.message || String(err) || 'unknown error').trim(), url);
    if (e instanceof ResponseTooLarge)
      return { status: 'failed', error: { code: 'push_invalid_response' satisfies BatonErrorCode, message: text } };
    return {
      status: 'failed',
      error: {
        code: 'push_unreachable' satisfies BatonErrorCode,
        message: `POST ${where(url)} failed after ${secs} s: ${code ? `${code}: ` : ''}${text || 'connection error'}`,
      },
    };
  }

  /** POST with node:http (no client-side header/body timeouts: the task deadline bounds the wait). */
  private post(url: string, body: string, headers: Record<string, string>, signal: AbortSignal): Promise<{ status: number; text: string }> {
    const u = new URL(url);
    const mod = u.protocol === 'https:' ? https : http;
    const agent = u.protocol === 'https:' ? this.httpsAgent : this.httpAgent;
    return new Promise((resolve, reject) => {
      const req = mod.request(u, {
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        agent,
        signal,
      });
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > this.maxResponseBytes) {
            res.destroy(new ResponseTooLarge(`the agent's response was larger than ${this.maxResponseBytes} bytes`));
            return;
          }
          chunks.push(c);
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
        res.on('aborted', () => reject(new Error('the agent closed the connection before the response was complete')));
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  /** Stop admitting; give in-flight requests the grace period; abort and release what is left. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.off();
    await this.pending?.catch(() => undefined);
    const all = () => Promise.all([...this.inflight.values()].map((f) => f.done));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([all(), new Promise((r) => (timer = setTimeout(r, this.shutdownGraceMs)))]);
    clearTimeout(timer);
    for (const f of this.inflight.values()) f.abort('shutdown');
    await all();
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }
}

class ResponseTooLarge extends Error {}

/** Where a request went, without the query string (it may carry a token). */
function where(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return 'the push URL';
  }
}
