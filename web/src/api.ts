/**
 * The dashboard's connection to the API: the same typed client the CLI uses (src/client.ts),
 * with the key kept in localStorage, and one shared EventSource on /v1/events for live updates.
 */
import { ApiError, BatonClient } from '../../src/client.ts';

export type { Agent, Execution, ExecutionDetail, ExecutionListItem, LogLine, Pool, PoolUsage } from '../../src/client.ts';
export { ApiError };

const KEY = 'baton.key';
export const getKey = () => localStorage.getItem(KEY);
export const setKey = (k: string) => localStorage.setItem(KEY, k);
export const clearKey = () => localStorage.removeItem(KEY);

export function client(): BatonClient {
  return new BatonClient({ server: location.origin, key: getKey() ?? undefined });
}

export function describe(err: unknown): string {
  if (err instanceof ApiError) return `${err.message} (${err.code})`;
  return (err as Error)?.message ?? String(err);
}

// ── Server-Sent Events ──────────────────────────────────────────────────────

export interface ExecutionChanged {
  id: string;
  agent: string;
  status: string;
  at: string;
}
type Listener = (e: ExecutionChanged) => void;
type StateListener = (s: LiveState) => void;
export type LiveState = 'connecting' | 'live' | 'reconnecting';

const listeners = new Set<Listener>();
const resyncListeners = new Set<() => void>();
const stateListeners = new Set<StateListener>();
let source: EventSource | null = null;
let state: LiveState = 'connecting';

function setState(s: LiveState) {
  state = s;
  for (const l of stateListeners) l(s);
}

/** EventSource cannot send headers: the key rides in ?key=, accepted on the SSE routes only. */
function ensureSource() {
  if (source || !getKey()) return;
  source = new EventSource(`/v1/events?key=${encodeURIComponent(getKey()!)}`);
  source.onopen = () => {
    // Changes made while the stream was down are not replayed: tell every view to refetch.
    if (state === 'reconnecting') for (const l of resyncListeners) l();
    setState('live');
  };
  source.onerror = () => setState('reconnecting'); // the browser reconnects by itself
  source.addEventListener('execution', (ev) => {
    const data = JSON.parse((ev as MessageEvent).data) as ExecutionChanged;
    for (const l of listeners) l(data);
  });
}

export function onExecutionChanged(l: Listener): () => void {
  ensureSource();
  listeners.add(l);
  return () => listeners.delete(l);
}

/** Called after the event stream reconnected (events may have been missed meanwhile). */
export function onResync(l: () => void): () => void {
  ensureSource();
  resyncListeners.add(l);
  return () => resyncListeners.delete(l);
}

export function onLiveState(l: StateListener): () => void {
  ensureSource();
  stateListeners.add(l);
  l(state);
  return () => stateListeners.delete(l);
}

export function closeEvents() {
  source?.close();
  source = null;
  setState('connecting');
}

export function logStreamUrl(id: string, after = 0): string {
  return `/v1/executions/${encodeURIComponent(id)}/logs?follow=true&after=${after}&key=${encodeURIComponent(getKey() ?? '')}`;
}

// ── History (GET /v1/history, admin keys) ───────────────────────────────────

export type HistoryStats = import('../../src/api/schemas/history.ts').HistoryStats;

/** History size, oldest rows, retention settings and the last prune. */
export async function historyStats(): Promise<HistoryStats> {
  return (await client().request<HistoryStats>('GET', '/v1/history')).body;
}

// ── Activity over time (GET /v1/agents/{agent}/series and /seats) ───────────

export type AgentSeries = import('../../src/api/schemas/activity.ts').AgentSeries;
export type AgentSeats = import('../../src/api/schemas/activity.ts').AgentSeats;
export type ActivityWindow = AgentSeries['window'];

/** Per-bucket completions, failures, duration percentiles, queue depth and seats in use. */
export async function agentSeries(agent: string, window: ActivityWindow): Promise<AgentSeries> {
  return (await client().request<AgentSeries>('GET', `/v1/agents/${encodeURIComponent(agent)}/series?window=${window}`)).body;
}

/** Which execution held which seat when, and what waits now. */
export async function agentSeats(agent: string, window: ActivityWindow): Promise<AgentSeats> {
  return (await client().request<AgentSeats>('GET', `/v1/agents/${encodeURIComponent(agent)}/seats?window=${window}`)).body;
}
