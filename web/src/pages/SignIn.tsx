import { useState, type FormEvent } from 'react';
import { BatonClient } from '../../../src/client.ts';
import { describe, setKey } from '../api.ts';

export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  const [key, setValue] = useState('');
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await new BatonClient({ server: location.origin, key: key.trim() }).listAgents();
      setKey(key.trim());
      onSignedIn();
    } catch (err) {
      setError(describe(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main className="signin">
      <form className="card" onSubmit={submit}>
        <h1>Baton</h1>
        <p>
          Sign in with an API key. The first start of <code>baton up</code> prints the admin key and saves it to{' '}
          <code>.baton/admin.key</code>.
        </p>
        <label>
          API key
          <input
            name="key"
            type="password"
            autoComplete="off"
            placeholder="bt_…"
            value={key}
            onChange={(e) => setValue(e.target.value)}
            required
          />
        </label>
        {error && (
          <p className="state error" role="alert">
            Sign-in failed: {error}
          </p>
        )}
        <button type="submit" disabled={busy || !key.trim()}>
          {busy ? 'Checking…' : 'Sign in'}
        </button>
        <p className="muted small">The key stays in this browser (localStorage) and is sent only to this server.</p>
      </form>
    </main>
  );
}
