/** The nice value of Baton's worker threads (thread-priority.js says why). */
export declare const WORKER_THREAD_NICE: number;
/** Lower the calling thread's priority to `nice` (never raise it); a no-op off Linux. */
export declare function lowerThisThreadsPriority(nice?: number): void;
