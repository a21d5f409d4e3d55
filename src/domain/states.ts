/**
 * The execution state set, defined once. The database enforces the same set with a CHECK
 * constraint (see src/store/migrations). Terminal states come last.
 *
 *   queued ──admit──► running ──complete──► succeeded | failed | cancelled
 *   queued ◄──lease lapsed / release── running
 *   (any start that started nothing) ──► skipped
 */
export const EXECUTION_STATES = Object.freeze(['queued', 'running', 'succeeded', 'failed', 'cancelled', 'skipped'] as const);

export type ExecutionStatus = (typeof EXECUTION_STATES)[number];

export const TERMINAL_STATES = Object.freeze(['succeeded', 'failed', 'cancelled', 'skipped'] as const);
export type TerminalStatus = (typeof TERMINAL_STATES)[number];

export function isTerminal(status: string): status is TerminalStatus {
  return (TERMINAL_STATES as readonly string[]).includes(status);
}

/** How an execution came to exist (`chain`: a subscription to another execution's outcome; `group`: a group's member or its join). */
export const TRIGGER_KINDS = Object.freeze(['schedule', 'manual', 'webhook', 'api', 'mcp', 'cli', 'retry', 'chain', 'group'] as const);
export type TriggerKind = (typeof TRIGGER_KINDS)[number];

/** Outcomes a worker may report on completion. */
export const COMPLETION_STATES = Object.freeze(['succeeded', 'failed', 'cancelled'] as const);
export type CompletionStatus = (typeof COMPLETION_STATES)[number];

export function isCompletionStatus(status: unknown): status is CompletionStatus {
  return (COMPLETION_STATES as readonly unknown[]).includes(status);
}
