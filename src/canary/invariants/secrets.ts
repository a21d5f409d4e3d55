import { findSecret } from '../../domain/secrets.ts';
import { forScope, inScope } from '../sql.ts';
import { anyLike, CLIENT_FIELDS, touchedRows } from '../touched.ts';
import { idChunks, type ActivityInvariant, type Finding } from '../types.ts';

/**
 * G-04, over touched executions: payload and message are written at creation, result and error
 * message at the end, each with its event. Log lines are appended while an execution runs (no
 * event), so they are checked with the execution's next event — at the latest when it ends.
 * The LIKE prefilter runs in the database over the executions in scope only, in the read of them
 * every row invariant shares (src/canary/touched.ts), and over execution_logs by its
 * (execution_id, seq) key; the columns of the rows it flags are read, and the patterns decide.
 */
export const G04: ActivityInvariant = {
  kind: 'activity',
  id: 'G-04',
  tier: 'A',
  severity: 'critical',
  holds:
    'no payload, message, result, error, usage or log line is stored with a recognisable secret (the patterns in src/domain/secrets.ts)',
  diagnoses: {
    secret_in_payload:
      'a task payload holds a recognisable secret: a caller put a credential in the task (reject or redact at the trigger/API edge)',
    secret_in_message:
      'a task message holds a recognisable secret: a caller put a credential in the task (reject or redact at the trigger/API edge)',
    secret_in_result: 'a result holds a recognisable secret: an agent returned a credential (worker/complete path stores results verbatim)',
    secret_in_error_message: 'an error message holds a recognisable secret: an agent or the dispatcher reported a credential in an error',
    secret_in_error_code:
      'an error code holds a recognisable secret: the completion path stored a client-supplied code without redaction (Engine.complete)',
    secret_in_usage:
      'reported usage holds a recognisable secret: the completion path stored client-supplied usage without redaction (Engine.complete)',
    secret_in_log: 'a log line holds a recognisable secret: an agent printed a credential (worker log path stores lines verbatim)',
  },
  grace: () => 0,
  fullWalksRows: true,
  rows: (tx, scope, ctx) =>
    forScope(scope, async (part) => {
      const out: Finding[] = [];
      const suspects = (await touchedRows(tx, part, ctx)).filter((r) => r.suspect).map((r) => r.id);
      const rows = [];
      for (const ids of idChunks(suspects))
        rows.push(
          ...(await tx
            .selectFrom('executions')
            .select(['id', 'agent', 'payload', 'message', 'result', 'error_code', 'error_message', 'usage'])
            .where('id', 'in', ids)
            .execute()),
        );
      for (const r of rows) {
        for (const field of CLIENT_FIELDS) {
          const kind = findSecret(r[field]);
          if (kind) {
            out.push({ subject: r.id, agent: r.agent, reason: `secret_in_${field}`, detail: { kind } });
            break;
          }
        }
      }
      const lines = await tx
        .selectFrom('execution_logs')
        .select(['execution_id', 'line'])
        .where((eb) => inScope(eb, 'execution_id', part))
        .where(anyLike('line'))
        .execute();
      for (const l of lines) {
        const kind = findSecret(l.line);
        if (kind) out.push({ subject: l.execution_id, agent: null, reason: 'secret_in_log', detail: { kind } });
      }
      return out;
    }),
};
