import { ApiError, Unreachable } from '../client.ts';

/** Exit codes a script can act on. */
export const EXIT = Object.freeze({
  ok: 0,
  error: 1,
  usage: 2,
  notFound: 3,
  auth: 4,
  alreadyRunning: 5,
  backlogFull: 6,
  executionFailed: 7,
  executionCancelled: 8,
  unreachable: 9,
  conflict: 10,
});

/** Map an error to a one-line reason and an exit code. */
export function describeError(err: unknown): { code: number; line: string } {
  if (err instanceof Unreachable)
    return { code: EXIT.unreachable, line: `${err.message} (is \`baton up\` running? set --server or BATON_URL)` };
  if (err instanceof ApiError) {
    const line = `${err.code}: ${err.message}`;
    switch (err.code) {
      case 'not_found':
        return { code: EXIT.notFound, line };
      case 'unauthorized':
      case 'forbidden':
        return { code: EXIT.auth, line };
      case 'already_running':
        return { code: EXIT.alreadyRunning, line }; // the message names the run in flight, queued or running
      case 'backlog_full':
        return { code: EXIT.backlogFull, line };
      case 'validation_error':
      case 'invalid_json':
      case 'payload_too_large':
        return { code: EXIT.usage, line };
      case 'lease_lost':
      case 'invalid_transition':
      case 'already_exists':
      case 'idempotency_key_reused':
      case 'idempotency_in_flight':
      case 'group_refused':
      case 'last_admin_key':
      case 'pool_in_use':
        return { code: EXIT.conflict, line };
      default:
        return { code: EXIT.error, line };
    }
  }
  return { code: EXIT.error, line: (err as Error)?.message ?? String(err) };
}
