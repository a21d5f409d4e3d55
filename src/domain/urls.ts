/**
 * A path segment that looks like a token rather than a name: 20 or more URL-safe characters with
 * both letters and digits (a Slack or Discord webhook's secret, an API key). A UUID or a long id is
 * taken too: redacting a name costs a reader a detail, missing a token leaks it.
 */
const TOKEN_SEGMENT = /^(?=[^/]*[A-Za-z])(?=[^/]*[0-9])[A-Za-z0-9._~-]{20,}$/;

/**
 * A URL with what may carry a credential taken out: user and password; every query value, and a
 * query key that stands alone (`?SECRET`); the fragment (`#access_token=…`); a path segment's
 * parameters (`;jsessionid=…`) and a segment that looks like a token (TOKEN_SEGMENT). Each is
 * replaced by `redacted`. What a reader who is not an admin may see of a push URL.
 */
export function redactUrl(url: string | null): string | null {
  if (url === null) return null;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return '[redacted]';
  }
  if (u.username) u.username = 'redacted';
  if (u.password) u.password = 'redacted';
  if (u.search) {
    const parts = [...u.searchParams].map(([k, v]) => (v === '' ? 'redacted' : `${encodeURIComponent(k)}=redacted`));
    u.search = parts.length > 0 ? `?${parts.join('&')}` : '';
  }
  if (u.hash) u.hash = 'redacted';
  u.pathname = u.pathname
    .split('/')
    .map((segment) => {
      const plain = segment.split(';')[0]!;
      const kept = TOKEN_SEGMENT.test(decodeSegment(plain)) ? 'redacted' : plain;
      return kept === segment ? segment : kept + (segment.includes(';') ? ';redacted' : '');
    })
    .join('/');
  return u.toString();
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/**
 * A URL written inside free text: a scheme, `://` and what follows up to a space or a quote. The
 * scheme's length is bounded so that a long run of letters costs a bounded look at each position.
 */
const URL_IN_TEXT = /\b[A-Za-z][A-Za-z0-9+.-]{0,31}:\/\/[^\s"'<>`]+/g;

/**
 * `text` with every URL in it passed through redactUrl, so an error message that names the push
 * URL (or any other) shows no more of it than an agent-scoped reader may see. A URL with nothing
 * to redact is left exactly as written; punctuation that ends a sentence stays outside the URL.
 */
export function redactUrlsIn(text: string): string {
  if (!text.includes('://')) return text;
  return text.replace(URL_IN_TEXT, (found) => {
    const trailing = /[.,;:!?)\]}]+$/.exec(found)?.[0] ?? '';
    const url = found.slice(0, found.length - trailing.length);
    let plain: string;
    try {
      plain = new URL(url).toString();
    } catch {
      return found;
    }
    const redacted = redactUrl(url)!;
    return redacted === plain ? found : redacted + trailing;
  });
}

/**
 * The parts of `url` that redactUrl takes out, as they may appear written elsewhere: user and
 * password, query values (and a key that stands alone), the fragment, a segment's parameters and
 * each token-like segment, both as written in the URL and decoded. Parts shorter than 6 characters
 * are left out: found anywhere in a text they would take ordinary words with them.
 */
export function urlSecrets(url: string): string[] {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return [];
  }
  const parts = [u.username, u.password, u.hash.slice(1)];
  // Each query value as written in the URL (an echo of the request shows it so) and as decoded.
  for (const [k, v] of u.searchParams) parts.push(v === '' ? k : v);
  for (const pair of u.search.slice(1).split('&')) parts.push(pair.includes('=') ? pair.slice(pair.indexOf('=') + 1) : pair);
  for (const segment of u.pathname.split('/')) {
    const [plain, ...params] = segment.split(';');
    if (TOKEN_SEGMENT.test(decodeSegment(plain!))) parts.push(plain!);
    parts.push(...params);
  }
  const all = new Set<string>();
  for (const p of parts) for (const form of [p, decodeSegment(p)]) if (form.length >= 6) all.add(form);
  // The longest first, so a secret that contains another is taken whole.
  return [...all].sort((a, b) => b.length - a.length);
}

/**
 * `text` with every secret part of `url` (urlSecrets) replaced by `redacted` wherever it appears:
 * a push endpoint's error page that echoes the request's path or query ("Cannot POST /hooks/<token>")
 * names no full URL for redactUrlsIn to find.
 */
export function redactUrlSecretsIn(text: string, url: string): string {
  let out = text;
  for (const secret of urlSecrets(url)) if (out.includes(secret)) out = out.split(secret).join('redacted');
  return out;
}
