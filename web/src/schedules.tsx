import { useState } from 'react';
import { ApiError, client, describe } from './api.ts';
import { link } from './ui.tsx';

export type { Schedule, ScheduleCreate, ScheduleListItem, Webhook } from '../../src/client.ts';
import type { Schedule } from '../../src/client.ts';

export const listSchedules = (agent?: string) => client().listSchedules(agent);
export const createSchedule = (agent: string, body: import('../../src/client.ts').ScheduleCreate) => client().createSchedule(agent, body);
export const listWebhooks = (agent?: string) => client().listWebhooks(agent);
export const setEnabled = (id: string, enabled: boolean) => client().updateSchedule(id, { enabled });

type RunOutcome =
  | { kind: 'started'; id: string }
  | { kind: 'already_running'; id?: string }
  | { kind: 'backlog_full'; message: string }
  | { kind: 'error'; message: string };

/** "Run now": shows exactly what the API answered; never "triggered" without an id. */
export function RunNow({ schedule }: { schedule: Pick<Schedule, 'id'> }) {
  const [busy, setBusy] = useState(false);
  const [out, setOut] = useState<RunOutcome>();
  const run = async () => {
    setBusy(true);
    setOut(undefined);
    try {
      const r = await client().triggerSchedule(schedule.id);
      setOut({ kind: 'started', id: r.execution_id });
    } catch (err) {
      if (err instanceof ApiError && err.code === 'already_running') {
        setOut({ kind: 'already_running', id: typeof err.body.execution_id === 'string' ? err.body.execution_id : undefined });
      } else if (err instanceof ApiError && err.code === 'backlog_full') setOut({ kind: 'backlog_full', message: err.message });
      else setOut({ kind: 'error', message: describe(err) });
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="runnow">
      <button onClick={run} disabled={busy}>
        {busy ? 'Starting…' : 'Run now'}
      </button>
      {out?.kind === 'started' && (
        <p className="outcome ok" role="status">
          Started: <a href={link('executions', out.id)}>{out.id}</a>
        </p>
      )}
      {out?.kind === 'already_running' && (
        <p className="outcome warn" role="status">
          Already running — no new run was started.{' '}
          {out.id && (
            <>
              Running: <a href={link('executions', out.id)}>{out.id}</a>
            </>
          )}
        </p>
      )}
      {out?.kind === 'backlog_full' && (
        <p className="outcome warn" role="status">
          Backlog full — no run was started. {out.message}
        </p>
      )}
      {out?.kind === 'error' && (
        <p className="outcome error" role="alert">
          Not started: {out.message}
        </p>
      )}
    </div>
  );
}
