import { BatonError } from './errors.ts';

/**
 * Bounds of list answers, defined once for the server, CLI, MCP and dashboard. A list never
 * returns bodies: a stored result may be megabytes, and a page of them would multiply the server's
 * memory for one answer; the single-execution read returns them in full.
 */

/** Page sizes of execution lists: the API refuses a larger `limit` (400 naming the field). */
export const EXECUTION_PAGE = Object.freeze({ default: 50, max: 200 });

/**
 * Page sizes of lists of configuration — schedules, webhooks, subscriptions (each item carries
 * previews, never a message or payload whole: each may hold 100,000 characters and 256 KiB).
 */
export const CONFIG_PAGE = Object.freeze({ default: 200, max: 500 });

/** Characters of `message`, `payload`, `result` and `error.message` a list item carries. */
export const PREVIEW_CHARS = 200;

/** Usage is a few token counts; a worker may send more (a completion may be 4 MiB): lists show it up to this size. */
export const USAGE_LIST_CHARS = 1024;

/** The cursor of a page of one agent's list (its key starts with the agent): refused when it came from another list. */
export function pageOfAgent<T extends { agent: string }>(after: T, agent: string): T {
  if (after.agent !== agent)
    throw new BatonError('validation_error', `querystring.cursor: a cursor of another list than agent '${agent}'s`);
  return after;
}
