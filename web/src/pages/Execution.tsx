import { useEffect, useRef, useState } from 'react';
import { isTerminal } from '../../../src/domain/states.ts';
import { client, describe, logStreamUrl, type LogLine } from '../api.ts';
import { useLive, useLoad, useTick } from '../hooks.ts';
import { duration, Empty, Failed, Json, Loading, Section, Status, Time, link } from '../ui.tsx';
import { WaitingPanel } from '../admission.tsx';
import { Provenance } from '../composition.tsx';

export function ExecutionPage({ id }: { id: string }) {
  useTick(5_000);
  const e = useLoad(() => client().getExecution(id), [id]);
  useLive((x) => x.id === id, e.reload, [id, e.reload]);
  if (e.error) return <Failed what={`execution ${id}`} error={e.error} retry={e.reload} />;
  if (!e.data) return <Loading what={`execution ${id}`} />;
  const x = e.data;
  const chain = x.retry_chain ?? [];
  return (
    <div className="grid">
      <Section
        title={`Execution ${x.id}`}
        actions={<CancelButton id={x.id} status={x.status} cancelRequested={!!x.cancel_requested_at} onDone={e.reload} />}
      >
        <dl className="facts">
          <dt>Status</dt>
          <dd>
            <Status status={x.status} />
            {x.cancel_requested_at && x.status === 'running' ? <span className="muted"> (cancellation requested)</span> : null}
          </dd>
          <dt>Agent</dt>
          <dd>
            <a href={link('agents', x.agent)}>{x.agent}</a>
          </dd>
          <dt>Trigger</dt>
          <dd>
            {x.trigger}
            {x.schedule_id ? (
              <>
                {' '}
                · schedule <span className="mono">{x.schedule_id}</span>
              </>
            ) : null}
          </dd>
          <dt>Attempt</dt>
          <dd>{x.attempt}</dd>
          <dt>Created</dt>
          <dd>
            <Time iso={x.created_at} />
          </dd>
          <dt>Started</dt>
          <dd>
            <Time iso={x.started_at} />
          </dd>
          <dt>Completed</dt>
          <dd>
            <Time iso={x.completed_at} />
          </dd>
          <dt>Duration</dt>
          <dd>{duration(x.duration_ms)}</dd>
          <dt>Worker</dt>
          <dd className="mono">{x.lease_owner ?? '—'}</dd>
        </dl>
        <h3>Message</h3>
        <pre className="message">{x.message}</pre>
      </Section>
      <WaitingPanel waiting={x.waiting} />
      <Provenance x={x} />
      <Section title={x.error ? 'Error' : 'Result'}>
        {x.error ? (
          <p className="state error">
            <strong>{x.error.code ?? 'error'}</strong>: {x.error.message ?? 'no message'}
          </p>
        ) : isTerminal(x.status) ? (
          <Json value={x.result} />
        ) : (
          <Empty>No result yet: the execution is {x.status}.</Empty>
        )}
        <h3>Usage</h3>
        <Usage usage={x.usage} />
      </Section>
      <Section title="Timeline">
        <ol className="timeline">
          {x.events.map((ev) => (
            <li key={ev.id} data-to={ev.to}>
              <Status status={ev.to} /> <span className="muted">from {ev.from ?? '(new)'}</span> {ev.reason && <span>· {ev.reason}</span>}{' '}
              <span className="muted">
                · {ev.actor} · attempt {ev.attempt} ·
              </span>{' '}
              <Time iso={ev.at} />
            </li>
          ))}
        </ol>
      </Section>
      <Section wide title="Logs">
        <Logs id={x.id} />
      </Section>
      {chain.length > 1 && (
        <Section title="Retry chain">
          <ol className="list">
            {chain.map((c, i) => (
              <li key={c}>
                {c === x.id ? (
                  <strong className="mono">{c} (this run)</strong>
                ) : (
                  <a className="mono" href={link('executions', c)}>
                    {c}
                  </a>
                )}{' '}
                <span className="muted">{i === 0 ? 'first run' : `retry ${i}`}</span>
              </li>
            ))}
          </ol>
        </Section>
      )}
    </div>
  );
}

function Usage({ usage }: { usage: unknown }) {
  if (!usage || typeof usage !== 'object') return <Empty>No usage reported.</Empty>;
  const u = usage as Record<string, unknown>;
  const parts = [
    u.input_tokens !== undefined && `${u.input_tokens} input tokens`,
    u.output_tokens !== undefined && `${u.output_tokens} output tokens`,
    u.total_tokens !== undefined && `${u.total_tokens} tokens in total`,
    u.cost_usd !== undefined && `$${Number(u.cost_usd).toFixed(4)}`,
  ].filter(Boolean);
  return parts.length ? <p>{parts.join(' · ')}</p> : <Json value={usage} />;
}

function CancelButton({
  id,
  status,
  cancelRequested,
  onDone,
}: {
  id: string;
  status: string;
  cancelRequested: boolean;
  onDone: () => void;
}) {
  const [busy, setBusy] = useState(false);
  const [msg, setMsg] = useState<string>();
  if (isTerminal(status)) return null;
  const cancel = async () => {
    if (!confirm(`Cancel ${id}?`)) return;
    setBusy(true);
    try {
      const r = await client().cancel(id);
      setMsg(r.status === 'cancelled' ? 'Cancelled.' : 'Cancellation requested: the worker is told on its next heartbeat.');
      onDone();
    } catch (err) {
      setMsg(`Not cancelled: ${describe(err)}`);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="cancel">
      <button className="danger" onClick={cancel} disabled={busy || cancelRequested}>
        {cancelRequested ? 'Cancellation requested' : 'Cancel'}
      </button>
      {msg && (
        <span className="small" role="status">
          {msg}
        </span>
      )}
    </div>
  );
}

/** Live logs over SSE (`?follow=true`): lines as they are written, closed at `event: end`. */
function Logs({ id }: { id: string }) {
  const [lines, setLines] = useState<LogLine[]>([]);
  const [state, setState] = useState<'loading' | 'live' | 'ended' | 'unavailable'>('loading');
  const box = useRef<HTMLPreElement>(null);
  useEffect(() => {
    setLines([]);
    setState('loading');
    let last = 0;
    let src: EventSource | null = null;
    let stopped = false;
    const open = () => {
      src = new EventSource(logStreamUrl(id, last));
      src.onopen = () => setState((s) => (s === 'ended' ? s : 'live'));
      src.addEventListener('log', (ev) => {
        const l = JSON.parse((ev as MessageEvent).data) as LogLine;
        if (l.seq <= last) return;
        last = l.seq;
        setLines((xs) => [...xs, l]);
      });
      src.addEventListener('end', () => {
        src?.close();
        setState('ended');
      });
      src.onerror = () => {
        // A refused stream (no such route, or gone) is CLOSED; a dropped one reconnects by itself.
        if (src?.readyState === EventSource.CLOSED && !stopped) setState((s) => (s === 'loading' ? 'unavailable' : s));
      };
    };
    open();
    return () => {
      stopped = true;
      src?.close();
    };
  }, [id]);
  useEffect(() => {
    box.current?.scrollTo({ top: box.current.scrollHeight });
  }, [lines.length]);
  if (state === 'unavailable') return <Empty>Logs are not available for this execution on this server.</Empty>;
  return (
    <div>
      <p className="muted small" data-logstate={state}>
        {state === 'loading'
          ? 'Connecting to the log stream…'
          : state === 'live'
            ? 'Streaming live.'
            : 'The execution has ended; these are all its lines.'}
      </p>
      {lines.length === 0 ? (
        <Empty>{state === 'ended' ? 'No log lines were written.' : 'No log lines yet.'}</Empty>
      ) : (
        <pre className="logs" ref={box}>
          {lines.map((l) => (
            <div key={l.seq} className={`log log-${l.stream}`}>
              {l.line}
            </div>
          ))}
        </pre>
      )}
    </div>
  );
}
