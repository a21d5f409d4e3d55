/** What a worker reports as it runs (WorkerOptions.onEvent): tasks starting and ending, and failed requests. */
export type WorkerEvent =
  | { type: 'task:start'; executionId: string; attempt: number }
  | { type: 'task:end'; executionId: string; status: string; reported: 'completed' | 'released' | 'lost' }
  /** The lease expired without a successful renewal: the task was aborted and will not be reported. */
  | { type: 'task:lapsed'; executionId: string; leaseTtlSeconds: number }
  | { type: 'transport:error'; op: string; error: string; retryInMs: number }
  /** The server answered again after transport errors on `op`. */
  | { type: 'transport:recovered'; op: string; failures: number }
  | { type: 'error'; op: string; error: string };
