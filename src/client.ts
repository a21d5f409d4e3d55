/**
 * A typed HTTP client for the Baton API, shared by the CLI, the worker SDK and tests.
 * Types come from the API schemas (src/api/schemas.ts): one source of truth.
 */
import type { z } from 'zod';
import type * as S from './api/schemas.ts';

export type AgentCreate = z.input<typeof S.AgentCreate>;
export type AgentPatch = z.input<typeof S.AgentPatch>;
export type Agent = z.infer<typeof S.Agent>;
export type Execution = z.infer<typeof S.Execution>;
export type ExecutionDetail = z.infer<typeof S.ExecutionDetail>;
export type SubmitBody = z.input<typeof S.SubmitBody>;
export type Created = z.infer<typeof S.Created>;
export type Task = z.infer<typeof S.Task>;
export type ClaimBody = z.input<typeof S.ClaimBody>;
export type CompleteBody = z.input<typeof S.CompleteBody>;
export type Heartbeat = z.infer<typeof S.HeartbeatResponse>;
export type ExecutionPage = z.infer<typeof S.ExecutionPage>;
export type ApiKey = z.infer<typeof S.ApiKey>;
export type ApiKeyCreated = z.infer<typeof S.ApiKeyCreated>;

/** A non-2xx answer: `code` is the API's machine-readable `error`. */
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
  constructor(readonly server: string, cause: unknown) {
    super(`cannot reach the Baton server at ${server}: ${(cause as Error)?.message ?? cause}`);
    this.name = 'Unreachable';
  }
}

export interface ClientOptions {
  server: string;
  key?: string;
  /** Marks requests as coming from the CLI (recorded as trigger `cli`). */
  via?: 'cli';
}

export class BatonClient {
  readonly server: string;
  constructor(private readonly opts: ClientOptions) {
    this.server = opts.server.replace(/\/+$/, '');
  }

  async request<T>(method: string, path: string, body?: unknown, init: { signal?: AbortSignal } = {}): Promise<{ status: number; body: T }> {
    const headers: Record<string, string> = {};
    if (this.opts.key) headers.authorization = `Bearer ${this.opts.key}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (this.opts.via) headers['x-baton-client'] = this.opts.via;
    let res: Response;
    try {
      res = await fetch(this.server + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: init.signal });
    } catch (err) {
      if ((err as Error)?.name === 'AbortError') throw err;
      throw new Unreachable(this.server, (err as any)?.cause ?? err);
    }
    const text = await res.text();
    const parsed = text ? safeJson(text) : null;
    if (!res.ok) {
      const b = (parsed && typeof parsed === 'object' ? parsed : {}) as Record<string, unknown>;
      throw new ApiError(res.status, String(b.error ?? `http_${res.status}`), String(b.message ?? text ?? res.statusText), b);
    }
    return { status: res.status, body: parsed as T };
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    return (await this.request<T>(method, path, body)).body;
  }

  // agents
  createAgent = (a: AgentCreate) => this.call<Agent>('POST', '/v1/agents', a);
  listAgents = async () => (await this.call<{ agents: Agent[] }>('GET', '/v1/agents')).agents;
  getAgent = (name: string) => this.call<Agent>('GET', `/v1/agents/${enc(name)}`);
  updateAgent = (name: string, patch: AgentPatch) => this.call<Agent>('PATCH', `/v1/agents/${enc(name)}`, patch);
  deleteAgent = (name: string) => this.call<{ deleted: string; cancelled: number; cancel_requested: number }>('DELETE', `/v1/agents/${enc(name)}`);

  // executions
  submit = (agent: string, body: SubmitBody) => this.call<Created>('POST', `/v1/agents/${enc(agent)}/executions`, body);
  getExecution = (id: string) => this.call<ExecutionDetail>('GET', `/v1/executions/${enc(id)}`);
  listExecutions = (q: Record<string, string | number | undefined> = {}) => {
    const qs = new URLSearchParams(Object.entries(q).filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)]));
    return this.call<ExecutionPage>('GET', `/v1/executions${qs.size ? '?' + qs : ''}`);
  };
  cancel = (id: string) => this.call<Execution>('POST', `/v1/executions/${enc(id)}/cancel`);

  // worker protocol
  async claim(agent: string, body: ClaimBody = {}, signal?: AbortSignal): Promise<Task[]> {
    const r = await this.request<{ tasks: Task[] } | null>('POST', `/v1/agents/${enc(agent)}/claim`, body, { signal });
    return r.status === 204 || !r.body ? [] : r.body.tasks;
  }
  heartbeat = (id: string, lease_token: string) => this.call<Heartbeat>('POST', `/v1/executions/${enc(id)}/heartbeat`, { lease_token });
  complete = (id: string, body: CompleteBody) => this.call<Execution>('POST', `/v1/executions/${enc(id)}/complete`, body);
  release = (id: string, lease_token: string) => this.call<Execution>('POST', `/v1/executions/${enc(id)}/release`, { lease_token });

  // keys
  createKey = (k: { name: string; scope: 'admin' | 'agent'; agent?: string }) => this.call<ApiKeyCreated>('POST', '/v1/keys', k);
  listKeys = async () => (await this.call<{ keys: ApiKey[] }>('GET', '/v1/keys')).keys;
  revokeKey = (id: string) => this.call<ApiKey>('DELETE', `/v1/keys/${enc(id)}`);

  /** Poll until the execution is terminal (or `timeoutMs` passes); `onTick` sees each read. */
  async waitFor(id: string, opts: { timeoutMs?: number; intervalMs?: number; onTick?: (e: ExecutionDetail) => void } = {}): Promise<ExecutionDetail> {
    const until = Date.now() + (opts.timeoutMs ?? Infinity);
    for (;;) {
      const e = await this.getExecution(id);
      opts.onTick?.(e);
      if (['succeeded', 'failed', 'cancelled', 'skipped'].includes(e.status) || Date.now() >= until) return e;
      await new Promise((r) => setTimeout(r, opts.intervalMs ?? 500));
    }
  }
}

const enc = encodeURIComponent;
function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return { error: 'invalid_response', message: text.slice(0, 500) };
  }
}
