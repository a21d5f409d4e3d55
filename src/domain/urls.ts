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
