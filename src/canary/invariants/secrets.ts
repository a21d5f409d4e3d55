import { sql } from 'kysely';
import { columnsOf } from '../tables.ts';
import { MAX_FINDINGS, type Finding, type Invariant } from '../types.ts';

/**
 * Recognisable secrets, by the prefix their issuers put on them — the same shapes (and minimum
 * lengths) src/engine/redact.ts removes from log lines before they are stored, so a redacted
 * line (`ghp_[redacted]`) never fires. The SQL prefilter finds rows containing a prefix; these
 * patterns decide (a prefix alone, like "task-sk-1" or "bt_x", is not a secret). Findings name
 * the kind, never the value.
 */
export const SECRET_PATTERNS: ReadonlyArray<{ kind: string; like: string; re: RegExp }> = [
  { kind: 'sk-', like: '%sk-%', re: /(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{16,}/ },
  { kind: 'ghp_', like: '%ghp_%', re: /(?<![A-Za-z0-9_])ghp_[A-Za-z0-9]{20,}/ },
  { kind: 'xoxb-', like: '%xoxb-%', re: /(?<![A-Za-z0-9-])xoxb-[A-Za-z0-9-]{10,}/ },
  { kind: 'AKIA', like: '%AKIA%', re: /(?<![A-Z0-9])AKIA[A-Z0-9]{16}(?![A-Z0-9])/ },
  { kind: 'bt_', like: '%bt_%', re: /(?<![A-Za-z0-9_])bt_[0-9a-f]{16}_[A-Za-z0-9_-]{8,}/ },
];

/** The kind of the first recognisable secret in `text`, if any. */
export function findSecret(text: string | null | undefined): string | undefined {
  if (!text) return undefined;
  return SECRET_PATTERNS.find((p) => p.re.test(text))?.kind;
}

/** Where log lines live once migration 0002_delivery exists: the first of these columns found. */
const LOG_TEXT_COLUMNS = ['line', 'text', 'message', 'content', 'data', 'body'];

interface TextRow {
  id: string;
  agent: string | null;
  field: 'payload' | 'result' | 'message' | 'error_message' | 'log';
  text: string | null;
}

/** G-04. The LIKE prefilter scans the text columns in the database; only candidate rows come back. */
export const G04: Invariant<TextRow> = {
  id: 'G-04',
  tier: 'A',
  severity: 'critical',
  holds: 'no payload, result, message or log line is stored with a recognisable secret (sk-, ghp_, xoxb-, AKIA, bt_)',
  diagnoses: {
    secret_in_payload: 'a task payload holds a recognisable secret: a caller put a credential in the task (reject or redact at the trigger/API edge)',
    secret_in_message: 'a task message holds a recognisable secret: a caller put a credential in the task (reject or redact at the trigger/API edge)',
    secret_in_result: 'a result holds a recognisable secret: an agent returned a credential (worker/complete path stores results verbatim)',
    secret_in_error_message: 'an error message holds a recognisable secret: an agent or the dispatcher reported a credential in an error',
    secret_in_log: 'a log line holds a recognisable secret: an agent printed a credential (worker log path stores lines verbatim)',
  },
  grace: () => 0,
  async population(tx, { kind, note }) {
    const out: TextRow[] = [];
    for (const field of ['payload', 'message', 'result', 'error_message'] as const) {
      const rows = await tx
        .selectFrom('executions')
        .select(['id', 'agent', sql<string | null>`${sql.ref(field)}`.as('text')])
        .where((eb) => eb.or(SECRET_PATTERNS.map((p) => eb(field, 'like', p.like))))
        .orderBy('id')
        .limit(MAX_FINDINGS + 1)
        .execute();
      for (const r of rows) out.push({ id: r.id, agent: r.agent, field, text: r.text });
    }
    const cols = await columnsOf(tx, kind, 'execution_logs');
    const textCol = LOG_TEXT_COLUMNS.find((c) => cols.has(c));
    if (cols.has('execution_id') && textCol) {
      const rows = await sql<{ id: string; text: string | null }>`
        SELECT execution_id AS id, ${sql.ref(textCol)} AS text FROM execution_logs
        WHERE ${sql.join(SECRET_PATTERNS.map((p) => sql`${sql.ref(textCol)} LIKE ${p.like}`), sql` OR `)}
        LIMIT ${MAX_FINDINGS + 1}`.execute(tx);
      for (const r of rows.rows) out.push({ id: r.id, agent: null, field: 'log', text: r.text });
    } else {
      note(cols.size === 0 ? 'log lines not checked: table execution_logs does not exist yet' : 'log lines not checked: execution_logs has no recognised text column');
    }
    return out;
  },
  evaluate(rows) {
    const out: Finding[] = [];
    for (const r of rows) {
      const kind = findSecret(r.text);
      if (kind) out.push({ subject: r.id, agent: r.agent, reason: `secret_in_${r.field}`, detail: { kind } });
    }
    return out;
  },
};
