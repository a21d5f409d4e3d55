import { expect } from 'vitest';
import type { AgentInput } from '../../src/engine/agents.ts';
import type { Engine } from '../../src/engine/engine.ts';

/**
 * Settings a test passes for a new agent. Loose on purpose: tests give partial and sometimes
 * invalid settings, and the Engine or the API is what checks them.
 */
export type AgentSettings = Partial<AgentInput> | Record<string, unknown>;

/**
 * A maker of agents created through the Engine with the file's `defaults` under each call's
 * settings, named `<prefix>-1`, `<prefix>-2`, … or by `name()` when the file numbers other names from
 * the same counter. `engine` is a getter because most files open their store (and so their Engine)
 * in a hook, after the maker is declared.
 */
export function agentMaker(engine: () => Engine, naming: Naming, defaults: AgentSettings = {}) {
  const next = namer(naming);
  return async (settings: AgentSettings = {}): Promise<string> => {
    const name = next();
    await engine().agents.create({ name, ...defaults, ...settings } as AgentInput, 'test');
    return name;
  };
}

/** The same through the HTTP API (`POST /v1/agents`), which must answer 201. */
export function agentMakerOverApi(
  post: (url: string, body: Record<string, unknown>) => Promise<{ status: number }>,
  naming: Naming,
  defaults: AgentSettings = {},
) {
  const next = namer(naming);
  return async (settings: AgentSettings = {}): Promise<string> => {
    const name = next();
    const r = await post('/v1/agents', { name, ...defaults, ...settings });
    expect(r.status).toBe(201);
    return name;
  };
}

/** A name prefix (numbered by the maker) or a function giving each new name. */
export type Naming = string | (() => string);

function namer(naming: Naming): () => string {
  if (typeof naming === 'function') return naming;
  let n = 0;
  return () => `${naming}-${++n}`;
}
