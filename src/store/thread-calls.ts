import type { Worker } from 'node:worker_threads';

/**
 * Calls to a worker thread, each a message with an id that its reply carries back. The thread
 * starts on the first call. An idle thread must not keep a finished process alive, and a call in
 * flight must (a promise alone does not): the thread is ref'd while anything is pending. If the
 * thread fails or exits, every pending call is rejected and the next call starts a new thread.
 * Used by SQLite's worker connections (sqlite-reader.ts) and the JSON thread (engine/json-thread.ts).
 */
type Pending<Reply> = Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>;

export class ThreadCalls<Reply extends { id: number }> {
  /** The running thread and the calls it owes replies to. */
  private current: { worker: Worker; pending: Pending<Reply> } | undefined;
  private nextId = 1;

  constructor(
    private readonly spawn: () => Worker,
    /** Names the thread in the error its exit rejects pending calls with. */
    private readonly name: string,
  ) {}

  /** The reply to `message` (sent with an `id` added); `transfer`: buffers moved to the thread, not copied. */
  call(message: object, transfer?: readonly ArrayBuffer[]): Promise<Reply> {
    const { worker, pending } = (this.current ??= this.start());
    const id = this.nextId++;
    return new Promise<Reply>((resolve, reject) => {
      pending.set(id, { resolve, reject });
      worker.ref();
      try {
        worker.postMessage({ id, ...message }, transfer);
      } catch (err) {
        pending.delete(id);
        if (pending.size === 0) worker.unref();
        throw err;
      }
    });
  }

  /** Stops the thread, if one runs; a later call starts another. */
  async terminate(): Promise<void> {
    const worker = this.current?.worker;
    this.current = undefined;
    if (worker) await worker.terminate();
  }

  private start(): { worker: Worker; pending: Pending<Reply> } {
    const worker = this.spawn();
    const pending: Pending<Reply> = new Map();
    const thread = { worker, pending };
    worker.on('message', (reply: Reply) => {
      const p = pending.get(reply.id);
      if (!p) return;
      pending.delete(reply.id);
      if (pending.size === 0) worker.unref();
      p.resolve(reply);
    });
    const fail = (err: Error) => {
      if (this.current === thread) this.current = undefined;
      for (const p of pending.values()) p.reject(err);
      pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`${this.name} exited (${code})`)));
    worker.unref();
    return thread;
  }
}
