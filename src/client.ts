/**
 * A typed HTTP client for the Baton API, shared by the CLI, the worker SDK and tests.
 * Types come from the API schemas (src/api/schemas.ts): one source of truth.
 */
import type { z } from 'zod';
import type * as S from './api/schemas.ts';
import type * as T from './api/schemas/triggers.ts';
import type * as L from './api/schemas/logs.ts';
import type * as C from './api/schemas/canary.ts';
import type * as B from './api/schemas/batch.ts';
import type * as CA from './api/schemas/claim-any.ts';
import type * as K from './api/schemas/composition.ts';
import type { BudgetAnswer } from './api/schemas/budget.ts';
import type * as P from './api/schemas/pools.ts';
import type { LiveKeys as LiveKeysSchema } from './api/schemas/flow-keys.ts';
import type { ViolationStateFilter } from './domain/canary.ts';
import { isTerminal } from './domain/states.ts';
import { readSse } from './sse.ts';

export type AgentCreate = z.input<typeof S.AgentCreate>;
export type AgentPatch = z.input<typeof S.AgentPatch>;
export type PoolCreate = z.input<typeof P.PoolCreate>;
export type PoolPatch = z.input<typeof P.PoolPatch>;
export type Pool = z.infer<typeof P.Pool>;
export type PoolUsage = z.infer<typeof P.PoolUsage>;
export type Agent = z.infer<typeof S.Agent>;
export type Execution = z.infer<typeof S.Execution>;
export type ExecutionDetail = z.infer<typeof S.ExecutionDetail>;
export type ExecutionStatusAnswer = z.infer<typeof S.ExecutionStatusAnswer>;
export type Waiting = NonNullable<ExecutionDetail['waiting']>;
/** A list item: previews instead of bodies (getExecution has them in full). */
export type ExecutionListItem = z.infer<typeof S.ExecutionListItem>;
export type SubmitBody = z.input<typeof S.SubmitBody>;
export type Created = z.infer<typeof S.Created>;
export type Task = z.infer<typeof S.Task>;
export type ClaimBody = z.input<typeof S.ClaimBody>;
export type ClaimAnyBody = z.input<typeof CA.ClaimAnyBody>;
export type CompleteBody = z.input<typeof B.CompleteAndClaimBody>;
/** The completed execution; `tasks` (and `claim_error`) when the completion asked to claim. */
export type Completed = z.infer<typeof B.Completed>;
/** One completion of a batch: what `complete` takes, plus the execution it completes. */
export type CompletionItem = B.CompletionsBody['completions'][number];
/** A batch completion's answer for one item: the single route's 200 answer, or its refusal. */
export type CompletionAnswer = B.CompletionAnswer;
export type SubmitBatchBody = B.SubmitBatchBody;
export type BatchItem = z.input<typeof B.BatchItem>;
export type SubmitBatchAnswer = B.SubmitBatchAnswer;
export type BatchItemAnswer = B.BatchItemAnswer;
export type Heartbeat = z.infer<typeof S.HeartbeatResponse>;
export type ExecutionPage = z.infer<typeof S.ExecutionPage>;
export type ApiKey = z.infer<typeof S.ApiKey>;
export type ApiKeyCreated = z.infer<typeof S.ApiKeyCreated>;
export type Schedule = z.infer<typeof T.Schedule>;
export type ScheduleListItem = z.infer<typeof T.ScheduleListItem>;
export type ScheduleCreate = z.input<typeof T.ScheduleCreate>;
export type SchedulePatch = z.input<typeof T.SchedulePatch>;
export type Triggered = z.infer<typeof T.Triggered>;
export type Webhook = z.infer<typeof T.Webhook>;
export type WebhookListItem = z.infer<typeof T.WebhookListItem>;
export type WebhookCreate = z.input<typeof T.WebhookCreate>;
export type WebhookCreated = z.infer<typeof T.WebhookCreated>;
export type Subscription = z.infer<typeof K.Subscription>;
export type SubscriptionListItem = z.infer<typeof K.SubscriptionListItem>;
export type SubscriptionCreate = z.input<typeof K.SubscriptionCreate>;
export type SubscriptionPatch = z.input<typeof K.SubscriptionPatch>;
export type GroupCreate = z.input<typeof K.GroupCreate>;
export type Group = z.infer<typeof K.Group>;
export type GroupCreated = z.infer<typeof K.GroupCreated>;
export type GroupPage = z.infer<typeof K.GroupPage>;
export type LogLine = z.infer<typeof L.LogLine>;
export type CanaryStatus = z.infer<typeof C.CanaryStatus>;
export type CanaryViolation = z.infer<typeof C.Violation>;
export type CanaryCycle = z.infer<typeof C.CycleReport>;
export type LogPage = z.infer<typeof L.LogPage>;
export type LogAppendResult = z.infer<typeof L.LogAppendResponse>;

/** A non-2xx answer: `code` is the API's machine-readable `error`. */
/** GET /v1/agents/{agent}/keys. */
export type LiveKeys = z.infer<typeof LiveKeysSchema>;

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly body: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** The server could not be reached at all. */
export class Unreachable extends Error {
  constructor(
    readonly server: string,
    cause: unknown,
  ) {
    super(`cannot reach the Baton server at ${server}: ${(cause as Error)?.message ?? cause}`);
    this.name = 'Unreachable';
  }
}

export interface ClientOptions {
  server: string;
  key?: string;
  /** Marks requests as coming from the CLI or MCP (recorded as trigger `cli` / `mcp`). */
  via?: 'cli' | 'mcp';
  /** Replaces the global fetch (the MCP endpoint calls the API in-process through it). */
  fetch?: typeof fetch;
  /**
   * Sends plain (non-streaming) requests instead of fetch. In Node, nodeHttpTransport
   * (src/worker/http.ts) costs less per request and starts faster; the CLI and the worker SDK use
   * it. The default, fetch, is what the dashboard has in the browser.
   */
  transport?: Transport;
}

/** One request, its whole answer. */
export type Transport = (req: {
  url: string;
  method: string;
  headers: Record<string, string>;
  body?: string;
  signal?: AbortSignal;
}) => Promise<{ status: number; text: string }>;

export class BatonClient {
  readonly server: string;
  constructor(private readonly opts: ClientOptions) {
    this.server = opts.server.replace(/\/+$/, '');
  }

  async request<T>(
    method: string,
    path: string,
    body?: unknown,
    init: { signal?: AbortSignal; headers?: Record<string, string> } = {},
  ): Promise<{ status: number; body: T }> {
    const headers: Record<string, string> = { ...init.headers };
    if (this.opts.key) headers.authorization = `Bearer ${this.opts.key}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (this.opts.via) headers['x-baton-client'] = this.opts.via;
    const payload = body === undefined ? undefined : JSON.stringify(body);
    let res: { status: number; text: string };
    try {
      const send = this.opts.transport ?? fetchTransport(this.opts.fetch ?? fetch);
      res = await send({ url: this.server + path, method, headers, body: payload, signal: init.signal });
    } catch (err) {
      if ((err as Error)?.name === 'AbortError') throw err;
      throw new Unreachable(this.server, (err as any)?.cause ?? err);
    }
    const parsed = res.text ? safeJson(res.text) : null;
    if (res.status < 200 || res.status > 299) {
      const b = (parsed && typeof parsed === 'object' ? parsed : {}) as Record<string, unknown>;
      throw new ApiError(res.status, String(b.error ?? `http_${res.status}`), String(b.message ?? (res.text || `HTTP ${res.status}`)), b);
    }
    return { status: res.status, body: parsed as T };
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    return (await this.request<T>(method, path, body)).body;
  }

  /** Every item of a paged list: `field` of each page, following next_cursor until it is null. */
  private async allPages<T>(path: string, query: Record<string, string | undefined>, field: string): Promise<T[]> {
    const all: T[] = [];
    let cursor: string | null = null;
    do {
      const qs = new URLSearchParams(
        Object.entries({ ...query, cursor: cursor ?? undefined }).filter((e): e is [string, string] => e[1] !== undefined),
      );
      const page: Record<string, unknown> & { next_cursor: string | null } = await this.call('GET', qs.size ? `${path}?${qs}` : path);
      all.push(...(page[field] as T[]));
      cursor = page.next_cursor;
    } while (cursor !== null);
    return all;
  }

  // agents
  createAgent = (a: AgentCreate) => this.call<Agent>('POST', '/v1/agents', a);
  listAgents = () => this.allPages<Agent>('/v1/agents', {}, 'agents');
  getAgent = (name: string) => this.call<Agent>('GET', `/v1/agents/${enc(name)}`);
  updateAgent = (name: string, patch: AgentPatch) => this.call<Agent>('PATCH', `/v1/agents/${enc(name)}`, patch);
  /** Pause an agent (idempotent: a paused agent keeps its first who, why and since). */
  pauseAgent = (name: string, reason: string) => this.call<Agent>('POST', `/v1/agents/${enc(name)}/pause`, { reason });
  resumeAgent = (name: string) => this.call<Agent>('POST', `/v1/agents/${enc(name)}/resume`);
  /** An agent's budget: per limit, the current window's spending, what remains and when it resets. */
  agentBudget = (name: string) => this.call<BudgetAnswer>('GET', `/v1/agents/${enc(name)}/budget`);
  /** An agent's live keys (a queued or running task): seats in use, queue depth, cap, throttle; a page in key order. */
  agentKeys = (name: string, q: { limit?: number; cursor?: string } = {}) => {
    const qs = new URLSearchParams(
      Object.entries(q)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => [k, String(v)]),
    );
    return this.call<LiveKeys>('GET', `/v1/agents/${enc(name)}/keys${qs.size ? '?' + qs : ''}`);
  };
  /** Close an agent's circuit breaker by hand (idempotent). */
  closeBreaker = (name: string) => this.call<Agent>('POST', `/v1/agents/${enc(name)}/breaker/close`);
  deleteAgent = (name: string) =>
    this.call<{ deleted: string; cancelled: number; cancel_requested: number }>('DELETE', `/v1/agents/${enc(name)}`);

  // pools
  createPool = (p: PoolCreate) => this.call<Pool>('POST', '/v1/pools', p);
  listPools = async () => (await this.call<{ pools: Pool[] }>('GET', '/v1/pools')).pools;
  /** A pool with its usage: its agents, seats in use, when its throttle next admits, its budget windows. */
  getPool = (name: string) => this.call<PoolUsage>('GET', `/v1/pools/${enc(name)}`);
  updatePool = (name: string, patch: PoolPatch) => this.call<Pool>('PATCH', `/v1/pools/${enc(name)}`, patch);
  /** Refused (409 pool_in_use, naming them) while agents draw from it. */
  deletePool = (name: string) => this.call<{ deleted: string }>('DELETE', `/v1/pools/${enc(name)}`);

  // executions
  submit = async (agent: string, body: SubmitBody, opts: { idempotencyKey?: string } = {}) =>
    (await this.request<Created>('POST', `/v1/agents/${enc(agent)}/executions`, body, { headers: idem(opts.idempotencyKey) })).body;
  /**
   * Submit many tasks to one agent in one request and one transaction: an answer per item, in
   * order (created, replayed from its idempotency_key, or refused, e.g. backlog_full past the room).
   */
  submitMany = (agent: string, items: BatchItem[]) =>
    this.call<SubmitBatchAnswer>('POST', `/v1/agents/${enc(agent)}/executions/batch`, { items });
  getExecution = (id: string) => this.call<ExecutionDetail>('GET', `/v1/executions/${enc(id)}`);
  /** Only the status: a light read for polling (getExecution parses the payload and result). */
  executionStatus = (id: string) => this.call<ExecutionStatusAnswer>('GET', `/v1/executions/${enc(id)}/status`);
  listExecutions = (q: Record<string, string | number | undefined> = {}) => {
    const qs = new URLSearchParams(
      Object.entries(q)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => [k, String(v)]),
    );
    return this.call<ExecutionPage>('GET', `/v1/executions${qs.size ? '?' + qs : ''}`);
  };
  cancel = (id: string) => this.call<Execution>('POST', `/v1/executions/${enc(id)}/cancel`);
  /** Retry a failed execution by hand: the new queued execution (retry_of set). */
  retry = (id: string) => this.call<Execution>('POST', `/v1/executions/${enc(id)}/retry`);

  // worker protocol
  async claim(agent: string, body: ClaimBody = {}, signal?: AbortSignal): Promise<Task[]> {
    const r = await this.request<{ tasks: Task[] } | null>('POST', `/v1/agents/${enc(agent)}/claim`, body, { signal });
    return r.status === 204 || !r.body ? [] : r.body.tasks;
  }
  /** One long-poll claim for several agents, each up to its `max` (POST /v1/claim). */
  async claimAny(body: ClaimAnyBody, signal?: AbortSignal): Promise<Task[]> {
    const r = await this.request<{ tasks: Task[] } | null>('POST', '/v1/claim', body, { signal });
    return r.status === 204 || !r.body ? [] : r.body.tasks;
  }
  /** Add agents to this key's waiting claim made with `claim_id` (widened: it took; false: its answer has none of their tasks). */
  widenClaim = (claim_id: string, agents: ClaimAnyBody['agents']) =>
    this.call<{ widened: boolean }>('POST', '/v1/claim/widen', { claim_id, agents });
  /** End the wait of this key's claim made with `claim_id`: it answers now, with what it took. */
  withdrawClaim = (claim_id: string) => this.call<{ withdrawn: boolean }>('POST', '/v1/claim/withdraw', { claim_id });
  heartbeat = (id: string, lease_token: string) => this.call<Heartbeat>('POST', `/v1/executions/${enc(id)}/heartbeat`, { lease_token });
  /** Report the outcome; with `body.claim`, the answer's `tasks` are the agent's next tasks, claimed in the same request. */
  complete = (id: string, body: CompleteBody) => this.call<Completed>('POST', `/v1/executions/${enc(id)}/complete`, body);
  /**
   * Report many outcomes in one request (at most 100): an answer per item, in order, each what
   * `complete` would have answered (`completed`) or thrown (`http_status`, `error`, `message`).
   */
  completeMany = async (completions: CompletionItem[]) =>
    (await this.call<B.CompletionsAnswer>('POST', '/v1/completions', { completions })).items;
  release = (id: string, lease_token: string) => this.call<Execution>('POST', `/v1/executions/${enc(id)}/release`, { lease_token });
  appendLogs = (id: string, lease_token: string, lines: Array<{ stream?: 'stdout' | 'stderr'; line: string }>) =>
    this.call<LogAppendResult>('POST', `/v1/executions/${enc(id)}/logs`, { lease_token, lines });

  // logs
  getLogs = (id: string, q: { after?: number; limit?: number } = {}) => {
    const qs = new URLSearchParams(
      Object.entries(q)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => [k, String(v)]),
    );
    return this.call<LogPage>('GET', `/v1/executions/${enc(id)}/logs${qs.size ? '?' + qs : ''}`);
  };
  /** Lines as they are written, then one `{ end: true, status }` when the execution has ended. */
  async *followLogs(
    id: string,
    opts: { after?: number; signal?: AbortSignal } = {},
  ): AsyncGenerator<LogLine | { end: true; status: string }> {
    const headers: Record<string, string> = { accept: 'text/event-stream' };
    if (this.opts.key) headers.authorization = `Bearer ${this.opts.key}`;
    const url = `${this.server}/v1/executions/${enc(id)}/logs?follow=true&after=${opts.after ?? 0}`;
    let res: Response;
    try {
      res = await (this.opts.fetch ?? fetch)(url, { headers, signal: opts.signal });
    } catch (err) {
      if ((err as Error)?.name === 'AbortError') throw err;
      throw new Unreachable(this.server, (err as any)?.cause ?? err);
    }
    if (!res.ok || !res.body) {
      const text = await res.text();
      const b = (text ? safeJson(text) : {}) as Record<string, unknown>;
      throw new ApiError(res.status, String(b.error ?? `http_${res.status}`), String(b.message ?? text), b);
    }
    for await (const ev of readSse(res.body)) {
      if (ev.event === 'log') yield JSON.parse(ev.data) as LogLine;
      else if (ev.event === 'end') {
        yield { end: true, status: String(JSON.parse(ev.data).status) };
        return;
      } else if (ev.event === 'error') throw new ApiError(500, 'internal', String(JSON.parse(ev.data).message), {});
    }
  }

  // schedules and webhooks (docs/triggers.md)
  createSchedule = (agent: string, s: ScheduleCreate) => this.call<Schedule>('POST', `/v1/agents/${enc(agent)}/schedules`, s);
  /** Every schedule (or one agent's), read a page at a time; list items carry previews of message and payload. */
  listSchedules = (agent?: string) =>
    this.allPages<ScheduleListItem>(agent ? `/v1/agents/${enc(agent)}/schedules` : '/v1/schedules', {}, 'schedules');
  getSchedule = (id: string) => this.call<Schedule>('GET', `/v1/schedules/${enc(id)}`);
  updateSchedule = (id: string, patch: SchedulePatch) => this.call<Schedule>('PATCH', `/v1/schedules/${enc(id)}`, patch);
  deleteSchedule = (id: string) =>
    this.call<{ deleted: string; cancelled: number; cancel_requested: number }>('DELETE', `/v1/schedules/${enc(id)}`);
  /** 201 with the run's id; ApiError 409 already_running (body.execution_id: the run in flight), 429, 404. */
  triggerSchedule = async (id: string, opts: { payload?: unknown; idempotencyKey?: string } = {}) =>
    (
      await this.request<Triggered>(
        'POST',
        `/v1/schedules/${enc(id)}/trigger`,
        opts.payload === undefined ? undefined : { payload: opts.payload },
        { headers: idem(opts.idempotencyKey) },
      )
    ).body;
  // subscriptions (chains): an agent's outcome starts a task on another
  createSubscription = (s: SubscriptionCreate) => this.call<Subscription>('POST', '/v1/subscriptions', s);
  /** Every subscription, or those where `agent` is the source or the target, read a page at a time; items carry previews of the templates. */
  listSubscriptions = (agent?: string) => this.allPages<SubscriptionListItem>('/v1/subscriptions', { agent }, 'subscriptions');
  getSubscription = (id: string) => this.call<Subscription>('GET', `/v1/subscriptions/${enc(id)}`);
  updateSubscription = (id: string, patch: SubscriptionPatch) => this.call<Subscription>('PATCH', `/v1/subscriptions/${enc(id)}`, patch);
  deleteSubscription = (id: string) => this.call<{ deleted: string }>('DELETE', `/v1/subscriptions/${enc(id)}`);
  // groups: fan-out with a join
  /** Create every member and the group in one transaction, or nothing (409 group_refused: details.items says why). */
  createGroup = async (g: GroupCreate, opts: { idempotencyKey?: string } = {}) =>
    (await this.request<GroupCreated>('POST', '/v1/groups', g, { headers: idem(opts.idempotencyKey) })).body;
  getGroup = (id: string) => this.call<Group>('GET', `/v1/groups/${enc(id)}`);
  listGroups = (q: { limit?: number; cursor?: string } = {}) => {
    const qs = new URLSearchParams(
      Object.entries(q)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => [k, String(v)]),
    );
    return this.call<GroupPage>('GET', `/v1/groups${qs.size ? '?' + qs : ''}`);
  };
  cancelGroup = (id: string) => this.call<{ changed: boolean; group: Group }>('POST', `/v1/groups/${enc(id)}/cancel`);
  /**
   * Poll until the group is settled: decided (or cancelled), and its join, if one was started,
   * terminal. Returns the last read when `timeoutMs` passes first.
   */
  async waitForGroup(id: string, opts: { timeoutMs?: number; intervalMs?: number; onTick?: (g: Group) => void } = {}): Promise<Group> {
    const until = Date.now() + (opts.timeoutMs ?? Infinity);
    for (;;) {
      const g = await this.getGroup(id);
      opts.onTick?.(g);
      if (groupSettled(g) || Date.now() >= until) return g;
      await new Promise((r) => setTimeout(r, Math.max(0, Math.min(opts.intervalMs ?? 500, until - Date.now()))));
    }
  }
  createWebhook = (w: WebhookCreate) => this.call<WebhookCreated>('POST', '/v1/webhooks', w);
  /** Every webhook (or one agent's), read a page at a time; items carry a preview of the message. */
  listWebhooks = (agent?: string) => this.allPages<WebhookListItem>('/v1/webhooks', { agent }, 'webhooks');
  getWebhook = (id: string) => this.call<Webhook>('GET', `/v1/webhooks/${enc(id)}`);
  rotateWebhook = (id: string, secret?: string) =>
    this.call<WebhookCreated>('POST', `/v1/webhooks/${enc(id)}/rotate`, secret ? { secret } : undefined);
  deleteWebhook = (id: string) => this.call<{ deleted: string }>('DELETE', `/v1/webhooks/${enc(id)}`);

  // keys
  createKey = (k: { name: string; scope: 'admin' | 'agent'; agent?: string }) => this.call<ApiKeyCreated>('POST', '/v1/keys', k);
  listKeys = async () => (await this.call<{ keys: ApiKey[] }>('GET', '/v1/keys')).keys;
  revokeKey = (id: string) => this.call<ApiKey>('DELETE', `/v1/keys/${enc(id)}`);

  // canary
  canaryStatus = () => this.call<CanaryStatus>('GET', '/v1/canary');
  canaryViolations = (
    q: {
      invariant?: string;
      state?: ViolationStateFilter;
      agent?: string;
      severity?: string;
      subject?: string;
      limit?: number;
      before?: number;
    } = {},
  ) => {
    const qs = new URLSearchParams(
      Object.entries(q)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => [k, String(v)]),
    );
    return this.call<{ violations: CanaryViolation[]; next_before: number | null }>(
      'GET',
      `/v1/canary/violations${qs.size ? '?' + qs : ''}`,
    );
  };
  /** `full`: judge all history (in bounded chunks) instead of the activity since the checkpoints. */
  canaryRun = (opts: { full?: boolean } = {}) => this.call<CanaryCycle>('POST', `/v1/canary/run${opts.full ? '?full=true' : ''}`);

  /**
   * Poll until the execution is terminal (or `timeoutMs` passes), then read it whole once;
   * `onTick` sees each status read. The polls read only the status: polling the whole execution
   * parsed its payload and result each time, and many MCP calls waiting on a large payload held the
   * server's event loop for seconds at a time. A server without the status route (its
   * router answers 404 `no route`) is polled whole, as before.
   */
  async waitFor(
    id: string,
    opts: { timeoutMs?: number; intervalMs?: number; onTick?: (e: { status: ExecutionStatusAnswer['status'] }) => void } = {},
  ): Promise<ExecutionDetail> {
    const until = Date.now() + (opts.timeoutMs ?? Infinity);
    let light = true;
    for (;;) {
      let read: { status: ExecutionStatusAnswer['status'] } | ExecutionDetail;
      try {
        read = light ? await this.executionStatus(id) : await this.getExecution(id);
      } catch (err) {
        if (!(light && err instanceof ApiError && err.status === 404 && err.message.startsWith('no route'))) throw err;
        light = false;
        continue;
      }
      opts.onTick?.(read);
      if (isTerminal(read.status) || Date.now() >= until) return light ? this.getExecution(id) : (read as ExecutionDetail);
      await new Promise((r) => setTimeout(r, Math.min(opts.intervalMs ?? 500, Math.max(0, until - Date.now()))));
    }
  }
}

const enc = encodeURIComponent;
/** A group is settled when it has decided (or was cancelled) and its join, if any was started, is terminal. */
export const groupSettled = (g: Group): boolean =>
  g.status !== 'running' && (g.join === null || g.join.execution_id === null || (g.join.status !== null && isTerminal(g.join.status)));
const idem = (key?: string): Record<string, string> => (key ? { 'idempotency-key': key } : {});
function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return { error: 'invalid_response', message: text.slice(0, 500) };
  }
}

const fetchTransport =
  (f: typeof fetch): Transport =>
  async ({ url, method, headers, body, signal }) => {
    const res = await f(url, { method, headers, body, signal });
    return { status: res.status, text: await res.text() };
  };
