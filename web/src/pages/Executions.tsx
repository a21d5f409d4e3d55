import { useState, type FormEvent } from 'react';
import { EXECUTION_STATES } from '../../../src/domain/states.ts';
import type { ExecutionListItem } from '../api.ts';
import { ApiError, client, describe } from '../api.ts';
import { useLive, useLoad, useTick } from '../hooks.ts';
import { duration, Empty, Failed, Loading, Section, Status, Time, link } from '../ui.tsx';

export interface Selection {
  selected: ReadonlySet<string>;
  toggle: (ids: string[], on: boolean) => void;
}

export function ExecutionTable({ rows, selection }: { rows: ExecutionListItem[]; selection?: Selection }) {
  const all = selection !== undefined && rows.length > 0 && rows.every((e) => selection.selected.has(e.id));
  return (
    <div className="table-wrap">
      <table className="executions">
        <thead>
          <tr>
            {selection && (
              <th>
                <input
                  type="checkbox"
                  aria-label="select every execution on this page"
                  checked={all}
                  onChange={(ev) =>
                    selection.toggle(
                      rows.map((e) => e.id),
                      ev.target.checked,
                    )
                  }
                />
              </th>
            )}
            <th>Execution</th>
            <th>Agent</th>
            <th>Status</th>
            <th>Trigger</th>
            <th>Attempt</th>
            <th>Created</th>
            <th>Duration</th>
            <th>Error</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((e) => (
            <tr key={e.id} data-execution={e.id}>
              {selection && (
                <td>
                  <input
                    type="checkbox"
                    aria-label={`select ${e.id}`}
                    checked={selection.selected.has(e.id)}
                    onChange={(ev) => selection.toggle([e.id], ev.target.checked)}
                  />
                </td>
              )}
              <td className="mono">
                <a href={link('executions', e.id)}>{e.id}</a>
              </td>
              <td>{e.agent}</td>
              <td>
                <Status status={e.status} />
              </td>
              <td>{e.trigger}</td>
              <td>{e.attempt}</td>
              <td>
                <Time iso={e.created_at} />
              </td>
              <td>{duration(e.duration_ms)}</td>
              <td className="err">{e.error?.code ?? ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** What a bulk action did to one execution, in words. */
interface BulkResult {
  id: string;
  ok: boolean;
  text: string;
  /** The execution a retry created, or the one a refusal names. */
  other?: string;
}

/** One request per execution, one after the other, each answered in words (its own route's answer). */
async function runBulk(ids: string[], one: (id: string) => Promise<BulkResult>): Promise<BulkResult[]> {
  const out: BulkResult[] = [];
  for (const id of ids) {
    try {
      out.push(await one(id));
    } catch (err) {
      const named = err instanceof ApiError && typeof err.body?.execution_id === 'string' ? (err.body.execution_id as string) : undefined;
      out.push({ id, ok: false, text: describe(err), other: named && named !== id ? named : undefined });
    }
  }
  return out;
}

const retryOne = async (id: string): Promise<BulkResult> => {
  const e = await client().retry(id);
  return { id, ok: true, text: 'retried as', other: e.id };
};
const cancelOne = async (id: string): Promise<BulkResult> => {
  const e = await client().cancel(id);
  return e.status === 'cancelled'
    ? { id, ok: true, text: 'cancelled' }
    : {
        id,
        ok: true,
        text: `was ${e.status} by then: asked to stop (it ends as cancelled when its worker stops, or after the grace period)`,
      };
};

export function ExecutionsPage({ query }: { query: URLSearchParams }) {
  useTick();
  const agent = query.get('agent') ?? '';
  const status = query.get('status') ?? '';
  const cursor = query.get('cursor') ?? '';
  /** Cursors of the pages before this one, to step back (keyset pages only know the next one). */
  const [back, setBack] = useState<string[]>([]);
  const [selected, setSelected] = useState<ReadonlySet<string>>(new Set());
  const [results, setResults] = useState<{ action: string; rows: BulkResult[] }>();
  const [busy, setBusy] = useState(false);
  // Reloaded per agent filter: a link may name an agent created since this page first loaded.
  const agents = useLoad(() => client().listAgents(), [agent]);
  const page = useLoad(
    () => client().listExecutions({ agent: agent || undefined, status: status || undefined, cursor: cursor || undefined, limit: PAGE }),
    [agent, status, cursor],
  );
  useLive((e) => !agent || e.agent === agent, page.reload, [agent, page.reload]);
  const go = (q: URLSearchParams) => {
    location.hash = `#/executions${q.size ? '?' + q : ''}`;
  };
  const setFilter = (k: string, v: string) => {
    const q = new URLSearchParams(query);
    if (v) q.set(k, v);
    else q.delete(k);
    q.delete('cursor');
    setBack([]);
    go(q);
  };
  const toPage = (next: string, stack: string[]) => {
    const q = new URLSearchParams(query);
    if (next) q.set('cursor', next);
    else q.delete('cursor');
    setBack(stack);
    go(q);
  };
  const selection: Selection = {
    selected,
    toggle: (ids, on) =>
      setSelected((prev) => {
        const next = new Set(prev);
        for (const id of ids) {
          if (on) next.add(id);
          else next.delete(id);
        }
        return next;
      }),
  };
  const rows = page.data?.executions ?? [];
  const chosen = rows.filter((e) => selected.has(e.id));
  const failed = chosen.filter((e) => e.status === 'failed');
  const queued = chosen.filter((e) => e.status === 'queued');
  const bulk = async (action: string, ids: string[], one: (id: string) => Promise<BulkResult>) => {
    setBusy(true);
    try {
      setResults({ action, rows: await runBulk(ids, one) });
      setSelected(new Set());
      page.reload();
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="grid">
      <Section
        wide
        title="Executions"
        actions={<ExecutionFilters agent={agent} status={status} agents={agents.data} setFilter={setFilter} />}
      >
        <BulkBar chosen={chosen.length} failed={failed} queued={queued} busy={busy} bulk={bulk} />
        {results && <BulkResults results={results} dismiss={() => setResults(undefined)} />}
        {page.error ? (
          <Failed what="executions" error={page.error} retry={page.reload} />
        ) : !page.data ? (
          <Loading what="executions" />
        ) : rows.length === 0 ? (
          <Empty>No executions{agent || status ? ' match these filters' : ' yet'}. This list updates live.</Empty>
        ) : (
          <ExecutionTable rows={rows} selection={selection} />
        )}
        <nav className="pager" aria-label="pages">
          <button className="secondary" disabled={!cursor} onClick={() => toPage('', [])}>
            Newest
          </button>
          <button className="secondary" disabled={!cursor} onClick={() => toPage(back[back.length - 1] ?? '', back.slice(0, -1))}>
            ← Newer
          </button>
          <button
            className="secondary"
            disabled={!page.data?.next_cursor}
            onClick={() => toPage(page.data!.next_cursor!, cursor ? [...back, cursor] : back)}
          >
            Older →
          </button>
        </nav>
      </Section>
    </div>
  );
}

/** Filter by agent and status, or jump to an execution by id. */
function ExecutionFilters({
  agent,
  status,
  agents,
  setFilter,
}: {
  agent: string;
  status: string;
  agents: ReadonlyArray<{ name: string }> | undefined;
  setFilter: (k: string, v: string) => void;
}) {
  return (
    <div className="filters">
      <SearchById />
      <label>
        Agent{' '}
        <select name="agent" value={agent} onChange={(e) => setFilter('agent', e.target.value)}>
          <option value="">all</option>
          {agents?.map((a) => (
            <option key={a.name} value={a.name}>
              {a.name}
            </option>
          ))}
        </select>
      </label>
      <label>
        Status{' '}
        <select name="status" value={status} onChange={(e) => setFilter('status', e.target.value)}>
          <option value="">all</option>
          {EXECUTION_STATES.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
      </label>
    </div>
  );
}

/** Retry the selected failed executions, cancel the selected queued ones. */
function BulkBar({
  chosen,
  failed,
  queued,
  busy,
  bulk,
}: {
  chosen: number;
  failed: ReadonlyArray<{ id: string }>;
  queued: ReadonlyArray<{ id: string }>;
  busy: boolean;
  bulk: (action: string, ids: string[], one: (id: string) => Promise<BulkResult>) => Promise<void>;
}) {
  return (
    <div className="bulk" role="group" aria-label="bulk actions">
      <span className="muted small">{chosen} selected</span>
      <button
        className="secondary"
        disabled={busy || failed.length === 0}
        onClick={() =>
          void bulk(
            'Retry',
            failed.map((e) => e.id),
            retryOne,
          )
        }
      >
        Retry failed ({failed.length})
      </button>
      <button
        className="secondary"
        disabled={busy || queued.length === 0}
        onClick={() =>
          void bulk(
            'Cancel',
            queued.map((e) => e.id),
            cancelOne,
          )
        }
      >
        Cancel queued ({queued.length})
      </button>
      {chosen > failed.length + queued.length && (
        <span className="muted small">
          {chosen - failed.length - queued.length} selected neither failed nor queued: no action applies to them
        </span>
      )}
    </div>
  );
}

/** What a bulk action did, per execution. */
function BulkResults({ results, dismiss }: { results: { action: string; rows: BulkResult[] }; dismiss: () => void }) {
  return (
    <div className="bulk-results" role="status" aria-label="bulk results">
      <p className="small">
        {results.action}: {results.rows.filter((r) => r.ok).length} done, {results.rows.filter((r) => !r.ok).length} refused{' '}
        <button className="link" onClick={dismiss}>
          Dismiss
        </button>
      </p>
      <ul className="list">
        {results.rows.map((r) => (
          <li key={r.id} data-execution={r.id} data-outcome={r.ok ? 'done' : 'refused'} className={r.ok ? 'ok' : 'err'}>
            <a className="mono" href={link('executions', r.id)}>
              {r.id}
            </a>
            : {r.text}{' '}
            {r.other && (
              <a className="mono" href={link('executions', r.other)}>
                {r.other}
              </a>
            )}
          </li>
        ))}
      </ul>
    </div>
  );
}

const PAGE = 50;

/** Go straight to one execution by its id; says so when there is none. */
function SearchById() {
  const [id, setId] = useState('');
  const [error, setError] = useState<string>();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const want = id.trim();
    if (!want) return;
    setError(undefined);
    try {
      await client().getExecution(want);
      location.hash = link('executions', want);
    } catch (err) {
      setError(err instanceof ApiError && (err.status === 404 || err.status === 400) ? `No execution has the id ${want}.` : describe(err));
    }
  };
  return (
    <form className="search" onSubmit={submit} role="search" aria-label="find an execution by id">
      <input name="search-id" placeholder="execution id (ex_…)" value={id} onChange={(e) => setId(e.target.value)} />
      <button type="submit" className="secondary">
        Find
      </button>
      {error && (
        <span className="err small" role="alert">
          {error}
        </span>
      )}
    </form>
  );
}
