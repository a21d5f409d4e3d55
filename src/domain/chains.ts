/**
 * Chains: a subscription starts a task on one agent when an execution of another
 * reaches a final status. The lists here are the one definition the engine, API, CLI and MCP use.
 */

/** Final statuses a subscription can wait for; `any` is each of succeeded, failed and cancelled (skipped never chains). */
export const SUBSCRIPTION_ON = Object.freeze(['succeeded', 'failed', 'cancelled', 'any'] as const);
export type SubscriptionOn = (typeof SUBSCRIPTION_ON)[number];

/**
 * Why a matching subscription started nothing (a chain_links row's `refused`): the chain is
 * deeper than BATON_CHAIN_DEPTH_LIMIT, the target's backlog is full (alerted), the target agent
 * is gone, or the rendered message or payload is over the limits.
 */
export const CHAIN_REFUSALS = Object.freeze(['depth_limit', 'backlog_full', 'agent_missing', 'template_too_large'] as const);
export type ChainRefusal = (typeof CHAIN_REFUSALS)[number];

/** The `invariant` column of a refused-chain alert row (it names what alerted, like the breaker's). */
export const CHAIN_ALERT = 'chain.refused';
