import { useEffect, useState } from 'react';
import { clearKey, closeEvents, getKey, onLiveState, type LiveState } from './api.ts';
import { useRoute } from './hooks.ts';
import { AgentPage } from './pages/Agent.tsx';
import { CanaryPage } from './pages/Canary.tsx';
import { ExecutionPage } from './pages/Execution.tsx';
import { ExecutionsPage } from './pages/Executions.tsx';
import { GroupPage, GroupsPage } from './pages/Groups.tsx';
import { PoolPage, PoolsPage } from './pages/Pools.tsx';
import { OverviewPage } from './pages/Overview.tsx';
import { SchedulesPage } from './pages/Schedules.tsx';
import { SignIn } from './pages/SignIn.tsx';

const NAV = [
  ['', 'Overview'],
  ['executions', 'Executions'],
  ['groups', 'Groups'],
  ['schedules', 'Schedules'],
  ['pools', 'Pools'],
  ['canary', 'Canary'],
] as const;

export function App() {
  const [signedIn, setSignedIn] = useState(() => !!getKey());
  const { parts, query } = useRoute();
  if (!signedIn) return <SignIn onSignedIn={() => setSignedIn(true)} />;
  const section = parts[0] ?? '';
  const signOut = () => {
    clearKey();
    closeEvents();
    setSignedIn(false);
  };
  let page;
  if (section === 'agents' && parts[1]) page = <AgentPage name={parts[1]} />;
  else if (section === 'executions' && parts[1]) page = <ExecutionPage id={parts[1]} />;
  else if (section === 'executions') page = <ExecutionsPage query={query} />;
  else if (section === 'groups' && parts[1]) page = <GroupPage id={parts[1]} />;
  else if (section === 'groups') page = <GroupsPage />;
  else if (section === 'pools' && parts[1]) page = <PoolPage name={parts[1]} />;
  else if (section === 'pools') page = <PoolsPage />;
  else if (section === 'schedules') page = <SchedulesPage />;
  else if (section === 'canary') page = <CanaryPage />;
  else if (section === '') page = <OverviewPage />;
  else
    page = (
      <p className="state error">
        No page here. <a href="#/">Go to the overview</a>.
      </p>
    );
  const active = section === 'agents' ? '' : section;
  return (
    <div className="app">
      <header className="top">
        <a className="brand" href="#/">
          Baton
        </a>
        <nav>
          {NAV.map(([path, label]) => (
            <a key={path} href={`#/${path}`} className={active === path ? 'active' : ''}>
              {label}
            </a>
          ))}
        </nav>
        <LiveBadge />
        <button className="link signout" onClick={signOut}>
          Sign out
        </button>
      </header>
      <main>{page}</main>
    </div>
  );
}

function LiveBadge() {
  const [state, setState] = useState<LiveState>('connecting');
  useEffect(() => onLiveState(setState), []);
  const label = state === 'live' ? 'live' : state === 'connecting' ? 'connecting…' : 'reconnecting…';
  return (
    <span className={`live live-${state}`} title="live updates over Server-Sent Events">
      {label}
    </span>
  );
}
