/**
 * A URL with its credentials taken out: user and password, and every query value (tokens often
 * ride there), replaced by `[redacted]`. What a reader who is not an admin may see of a push URL.
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
  for (const k of [...u.searchParams.keys()]) u.searchParams.set(k, 'redacted');
  return u.toString();
}
