/**
 * Pacing for the MCP endpoint. The SDK hands every message of a JSON-RPC batch (up to 100, its
 * bound) to the server at once and, in JSON mode, serialises every answer in the step that
 * completes the last one: 100 × tools/list held the event loop for 300–550 ms, ten get_execution
 * of a 1.8 MB result (a 50 MB answer) for 1.4 s. Here each message is handed over in its own turn
 * of the event loop, each large step of a tool call (parsing the API's answer, serialising the
 * result) waits for a turn of its own, and a batch's answers are bounded in size, so the final
 * serialisation is bounded too.
 */
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { isJSONRPCErrorResponse, isJSONRPCResultResponse, type JSONRPCMessage, type RequestId } from '@modelcontextprotocol/sdk/types.js';

/**
 * The JSON of a batch's answers, at most (characters): the SDK serialises them in one step, ~35 ms
 * for 4 MiB (100 × tools/list make 3.9 MiB). One call's answer is bounded by the API's own limits
 * instead (a 4 MiB result makes a get_execution answer of about 10 MiB): it is never refused alone.
 */
const BATCH_ANSWER_MAX_CHARS = 4 * 1024 * 1024;
/** The JSON-RPC error code of an answer refused by that bound (implementation-defined server error range; docs/mcp.md). */
const ANSWER_TOO_LARGE = -32010;

const MiB = (chars: number) => `${(chars / 1024 / 1024).toFixed(1)} MiB`;

const waiters: Array<() => void> = [];
function releaseOne() {
  const resolve = waiters.shift()!;
  // An immediate queued from an immediate runs in the next turn, after pending I/O.
  if (waiters.length > 0) setImmediate(releaseOne);
  resolve();
}
/**
 * Resolves in a turn of the event loop of its own, after the I/O pending now: waiters are released
 * one per turn, first come first served, so concurrent calls (a batch's, or several POSTs') take
 * their large steps in separate turns instead of back to back when their reads complete together.
 */
export function ownTurn(): Promise<void> {
  return new Promise((resolve) => {
    if (waiters.push(resolve) === 1) setImmediate(releaseOne);
  });
}

const tooLarge = (id: RequestId | undefined, chars: number, answered: number): JSONRPCMessage => ({
  jsonrpc: '2.0',
  id,
  error: {
    code: ANSWER_TOO_LARGE,
    message: `answer too large: the answers of one batch are bounded at ${MiB(BATCH_ANSWER_MAX_CHARS)} of JSON and this one (${MiB(chars)}) would take the batch past it (${MiB(answered)} already); send this call again on its own or in a smaller batch`,
  },
});

/**
 * Wraps a connected transport (once the server set its onmessage): messages are delivered one per
 * turn of the event loop, and an answer that would take the POST's answers past
 * BATCH_ANSWER_MAX_CHARS is replaced by an ANSWER_TOO_LARGE error (the first answer always goes out).
 */
export function paceMessages(transport: Transport): void {
  const deliver = transport.onmessage!;
  transport.onmessage = (message, extra) => {
    ownTurn()
      .then(() => deliver(message, extra))
      .catch((err: Error) => transport.onerror?.(err));
  };

  const send = transport.send.bind(transport);
  let answered = 0;
  transport.send = async (message, options) => {
    if (!isJSONRPCResultResponse(message) && !isJSONRPCErrorResponse(message)) return send(message, options);
    const chars = JSON.stringify(message).length;
    const refused = answered > 0 && answered + chars > BATCH_ANSWER_MAX_CHARS;
    const out = refused ? tooLarge(message.id, chars, answered) : message;
    if (!refused) answered += chars;
    // Measuring this answer and the SDK's serialising all of them (when it is the last) in separate turns.
    await ownTurn();
    return send(out, options);
  };
}
