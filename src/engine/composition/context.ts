import type { AlertSinkKind } from '../../domain/canary.ts';
import type { StoreAdapter } from '../../store/adapter.ts';

/** What work caused by a final outcome needs of its caller: the store, the transaction's clock and actor, alert sinks. */
export interface FollowContext {
  readonly store: StoreAdapter;
  readonly now: number;
  readonly actor: string;
  readonly alertSinks: readonly AlertSinkKind[];
  /** Longest chain of subscriptions a task may sit at the end of (BATON_CHAIN_DEPTH_LIMIT). */
  readonly chainDepthLimit: number;
  /** Agents the caller knows have no enabled subscription (read in this transaction): their outcomes start no chain. */
  readonly unsubscribed?: ReadonlySet<string>;
  /**
   * An agent being deleted (engine.agents.delete cancels its work in chunks before its row goes): a
   * group decided meanwhile refuses a join on it (agent_missing), as it would once the row is gone.
   */
  readonly deleting?: string;
}
