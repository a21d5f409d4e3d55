/**
 * Recognisable secrets: the one list. The redactor (src/domain/redact.ts) removes them from
 * everything Baton stores on a client's behalf, and the canary's G-04 looks for them in what was
 * stored; both read this list, so a shape one knows the other knows. Each entry: the kind (the
 * head kept visible after redaction, and named in findings — never the value), SQL LIKE
 * prefilters the canary uses to find candidate rows (`_` matches any character there, so they are
 * a little wider than the prefix: the pattern decides), and the exact pattern.
 */
export interface SecretPattern {
  kind: string;
  like: readonly string[];
  /** Global: used with replace(); reset lastIndex when testing. */
  re: RegExp;
}

export const SECRET_PATTERNS: readonly SecretPattern[] = Object.freeze([
  // OpenAI / Anthropic style: sk-…, sk-proj-…, sk-ant-…
  { kind: 'sk-', like: ['%sk-%'], re: /(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{16,}/g },
  // GitHub: classic (ghp_), OAuth (gho_), app (ghs_, ghu_), refresh (ghr_), fine-grained (github_pat_)
  {
    kind: 'github',
    like: ['%ghp_%', '%gho_%', '%ghs_%', '%ghu_%', '%ghr_%', '%github_pat_%'],
    re: /(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})/g,
  },
  // Slack: bot, user, app, refresh, config tokens (xoxb-, xoxp-, xoxa-, xoxr-, xoxe-, xoxs-)
  { kind: 'xox', like: ['%xox_-%'], re: /(?<![A-Za-z0-9-])xox[abeprs]-[A-Za-z0-9-]{10,}/g },
  // AWS access key ids: long-lived (AKIA) and temporary (ASIA)
  { kind: 'aws', like: ['%AKIA%', '%ASIA%'], re: /(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])/g },
  // Baton's own: API keys bt_<16 hex>_<secret>, webhook URL tokens bwh_<43>, webhook secrets whsec_<43>
  { kind: 'bt_', like: ['%bt_%'], re: /(?<![A-Za-z0-9_])bt_[0-9a-f]{16}_[A-Za-z0-9_-]{8,}/g },
  { kind: 'bwh_', like: ['%bwh_%'], re: /(?<![A-Za-z0-9_])bwh_[A-Za-z0-9_-]{20,}/g },
  { kind: 'whsec_', like: ['%whsec_%'], re: /(?<![A-Za-z0-9_])whsec_[A-Za-z0-9_+/=-]{16,}/g },
]);

/**
 * Every pattern's match starts with one of these heads. JSON.stringify leaves their characters
 * as they are, so a value none of whose strings holds a secret is told by one search of its JSON
 * text for a head (test/api/hardening.test.ts checks each pattern against the list).
 */
const HEADS = 'sk-|github_pat_|gh[pousr]_|xox[abeprs]-|AKIA|ASIA|bt_|bwh_|whsec_';
/** Some secret's head somewhere in the text: the text may hold a secret (no head: it holds none). */
export const ANY_SECRET_HEAD = new RegExp(HEADS);

/** The head of a matched secret, kept visible after redaction (`ghp_[redacted]`). */
const HEAD = new RegExp(`^(${HEADS})`);
export const secretHead = (match: string): string => HEAD.exec(match)?.[1] ?? '';

/** The kind of the first recognisable secret in `text` (its head, e.g. `ghp_`, `ASIA`), if any. */
export function findSecret(text: string | null | undefined): string | undefined {
  if (!text) return undefined;
  for (const p of SECRET_PATTERNS) {
    p.re.lastIndex = 0;
    const hit = p.re.exec(text);
    p.re.lastIndex = 0;
    if (hit) return secretHead(hit[0]) || p.kind;
  }
  return undefined;
}
