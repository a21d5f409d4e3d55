import { useCallback, useEffect, useRef, useState } from 'react';
import { onExecutionChanged, onResync, type ExecutionChanged } from './api.ts';

export interface Loaded<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
}

/** Load once per `deps`; `reload` refetches without clearing what is shown. */
export function useLoad<T>(fn: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<unknown>();
  const [loading, setLoading] = useState(true);
  const seq = useRef(0);
  const run = useCallback(() => {
    const mine = ++seq.current;
    setLoading(true);
    fn().then(
      (d) => {
        if (mine !== seq.current) return;
        setData(d);
        setError(undefined);
        setLoading(false);
      },
      (e) => {
        if (mine !== seq.current) return;
        setError(e);
        setLoading(false);
      },
    );
  }, deps);
  useEffect(() => {
    setData(undefined);
    run();
  }, [run]);
  return { data, error, loading, reload: run };
}

/**
 * Call `onChange` (coalesced: at most once per 250 ms) when an execution matching `filter`
 * changes status anywhere. Live updates come from the server's event stream, not a timer.
 */
export function useLive(filter: (e: ExecutionChanged) => boolean, onChange: () => void, deps: unknown[]) {
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const off = onExecutionChanged((e) => {
      if (!filter(e) || timer) return;
      timer = setTimeout(() => {
        timer = undefined;
        onChange();
      }, 250);
    });
    const offResync = onResync(onChange);
    return () => {
      off();
      offResync();
      if (timer) clearTimeout(timer);
    };
  }, deps);
}

/** Re-render every `ms` so relative times stay true. */
export function useTick(ms = 10_000) {
  const [, set] = useState(0);
  useEffect(() => {
    const t = setInterval(() => set((n) => n + 1), ms);
    return () => clearInterval(t);
  }, [ms]);
}

/** Hash routing: #/executions/ex_… → ['executions', 'ex_…']. */
export function useRoute(): { parts: string[]; query: URLSearchParams } {
  const read = () => {
    const [path, qs] = location.hash.replace(/^#\/?/, '').split('?');
    return { parts: (path ?? '').split('/').filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(qs ?? '') };
  };
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const on = () => setRoute(read());
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return route;
}
