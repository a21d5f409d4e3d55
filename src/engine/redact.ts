/**
 * Secret redaction for text Baton stores on someone else's behalf (log lines, push error
 * bodies). Recognisable key shapes are replaced before anything is written, so a secret a task
 * printed never reaches the database (the canary's G-04 checks the same prefixes).
 */
const PATTERNS: ReadonlyArray<{ prefix: string; re: RegExp }> = [
  // OpenAI / Anthropic style: sk-…, sk-proj-…, sk-ant-…
  { prefix: 'sk-', re: /(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{16,}/g },
  // GitHub tokens: classic (ghp_), OAuth (gho_), app (ghs_, ghu_, ghr_), fine-grained (github_pat_)
  { prefix: 'gh', re: /(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})/g },
  // Slack: bot, user, app, refresh tokens
  { prefix: 'xox', re: /(?<![A-Za-z0-9-])xox[abeprs]-[A-Za-z0-9-]{10,}/g },
  // AWS access key ids
  { prefix: 'AKIA', re: /(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])/g },
  // Baton's own API keys: bt_<16 hex id>_<secret>
  { prefix: 'bt_', re: /(?<![A-Za-z0-9_])bt_[0-9a-f]{16}_[A-Za-z0-9_-]{8,}/g },
];

/** Replace every recognisable secret in `text` with `[redacted]` (keeping its kind visible). */
export function redactSecrets(text: string): string {
  let out = text;
  for (const { re } of PATTERNS) {
    if (out.length === 0) break;
    out = out.replace(re, (m) => `${kindOf(m)}[redacted]`);
  }
  return out;
}

/** The recognisable head of a secret (`sk-`, `ghp_`, `xoxb-`, `AKIA`, `bt_`), kept so a reader knows what was there. */
function kindOf(m: string): string {
  const head = /^(sk-|github_pat_|gh[pousr]_|xox[abeprs]-|AKIA|ASIA|bt_)/.exec(m);
  return head ? head[1]! : '';
}

/** True when `text` still holds something that looks like a secret (used by tests and checks). */
export function containsSecret(text: string): boolean {
  return PATTERNS.some(({ re }) => {
    re.lastIndex = 0;
    const hit = re.test(text);
    re.lastIndex = 0;
    return hit;
  });
}

/** `redactSecrets` over every string in a JSON value (keys included); other values unchanged. */
export function redactJson<T>(value: T): T {
  if (typeof value === 'string') return redactSecrets(value) as T;
  if (Array.isArray(value)) return value.map((v) => redactJson(v)) as T;
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [redactSecrets(k), redactJson(v)])) as T;
  }
  return value;
}
