import type { ReactNode } from 'react';
import { duration, relativeTime } from '../../src/cli/output.ts';
import { ApiError, clearKey, describe } from './api.ts';

export { duration };

export function Time({ iso }: { iso: string | null | undefined }) {
  if (!iso) return <span className="muted">—</span>;
  return (
    <time dateTime={iso} title={new Date(iso).toLocaleString()}>
      {relativeTime(iso)}
    </time>
  );
}

export function Status({ status }: { status: string }) {
  return (
    <span className={`status status-${status}`} data-status={status}>
      {status}
    </span>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p className="state loading" role="status">
      Loading {what}…
    </p>
  );
}

export function Failed({ what, error, retry }: { what: string; error: unknown; retry?: () => void }) {
  if (error instanceof ApiError && error.status === 401) {
    const signOut = () => {
      clearKey();
      location.reload();
    };
    return (
      <div className="state error" role="alert">
        The server refused this API key (revoked or unknown).{' '}
        <button className="link" onClick={signOut}>
          Sign in again
        </button>
      </div>
    );
  }
  return (
    <div className="state error" role="alert">
      Could not load {what}: {describe(error)}
      {retry && (
        <button className="link" onClick={retry}>
          Try again
        </button>
      )}
    </div>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="state empty">{children}</p>;
}

export function Section({ title, actions, children, wide }: { title: string; actions?: ReactNode; children: ReactNode; wide?: boolean }) {
  return (
    <section className={wide ? 'card wide' : 'card'}>
      <header className="card-head">
        <h2>{title}</h2>
        {actions}
      </header>
      {children}
    </section>
  );
}

export const link = (...parts: string[]) => '#/' + parts.map(encodeURIComponent).join('/');

export function Json({ value }: { value: unknown }) {
  if (value === null || value === undefined) return <span className="muted">none</span>;
  // A command worker's result is its stdout: show text as text.
  return <pre className="json">{typeof value === 'string' ? value : JSON.stringify(value, null, 2)}</pre>;
}
