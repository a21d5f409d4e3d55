/**
 * The worker SDK, runnable: `BATON_API_KEY=bt_… npx tsx examples/sdk-worker.ts demo`
 * (with `baton up` running and an agent named demo). Submit with `npx baton run demo "hi" --wait`.
 */
import { createWorker, outcome } from '../src/sdk.ts'; // in your project: from '@baton/sdk'

const worker = createWorker({
  server: process.env.BATON_URL ?? 'http://127.0.0.1:7070',
  key: process.env.BATON_API_KEY,
  agent: process.argv[2] ?? 'demo',
  concurrency: 2,
  async handler(task) {
    task.log(`attempt ${task.attempt}: ${task.message}`);
    for (let step = 1; step <= 3; step++) {
      if (task.signal.aborted) throw task.signal.reason; // cancelled, deadline, lease lost or shutdown
      task.log(`step ${step}/3`);
      await new Promise((r) => setTimeout(r, 300));
    }
    return outcome({ status: 'succeeded', result: { echo: task.message }, usage: { input_tokens: task.message.length, output_tokens: 3 } });
  },
  onEvent: (e) => console.error(e),
});

await worker.start();
console.error('worker started; Ctrl-C to stop (running tasks finish, or are released)');
process.once('SIGINT', () => void worker.stop());
process.once('SIGTERM', () => void worker.stop());
await worker.done;
