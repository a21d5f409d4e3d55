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
