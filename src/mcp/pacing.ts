/**
 * Pacing for the MCP endpoint. The SDK hands every message of a JSON-RPC batch (up to 100, its
 * bound) to the server at once and, in JSON mode, serialises every answer in the step that
 * completes the last one: a full batch of tools/list, or a few get_execution of a large result,
 * held the event loop far too long. Here each message is handed over in its own turn
 * of the event loop, each large step of a tool call (parsing the API's answer, serialising the
 * result) waits for a turn of its own, and a batch's answers are bounded in size, so the final
 * serialisation is bounded too.
 */
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  isJSONRPCErrorResponse,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  type JSONRPCMessage,
  type JSONRPCResultResponse,
  type RequestId,
} from '@modelcontextprotocol/sdk/types.js';

/**
 * The JSON of a batch's answers, at most (characters): the SDK serialises them in one step, and
 * this is about a full batch of tools/list. One call's answer is bounded by the API's own limits
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
 * A field of a cut answer's structuredContent longer than this (characters of JSON) is left out:
 * what stays is ids, statuses and messages, never a result.
 */
const SHORT_FIELD_CHARS = 4096;

/**
 * The answer of a call that may have taken effect (a tool without readOnlyHint: run_task started
 * a run, run_group a group), past the bound: not refused — sending the call again would do it
 * twice — but cut to its short fields, saying so. Each field it leaves out is optional in the
 * tool's outputSchema (the long ones are the outcome read back: `execution`, `group`, `join`), so
 * the cut answer still matches it. A result without structuredContent (an error result) is short.
 */
function cut(message: JSONRPCResultResponse, tool: string, chars: number, answered: number): JSONRPCResultResponse {
  const full = (message.result as { structuredContent?: Record<string, unknown> }).structuredContent;
  if (!full) return message;
  const kept: Record<string, unknown> = {};
  const left: string[] = [];
  for (const [k, v] of Object.entries(full)) {
    if ((JSON.stringify(v)?.length ?? 0) > SHORT_FIELD_CHARS) left.push(k);
    else kept[k] = v;
  }
  const note =
    `${tool} took effect, but its whole answer (${MiB(chars)}) would take this batch past its bound of ` +
    `${MiB(BATCH_ANSWER_MAX_CHARS)} of JSON (${MiB(answered)} already), so it is cut to its short fields` +
    (left.length ? ` (left out: ${left.join(', ')}; read them with get_execution or get_group)` : '') +
    '. Do not send this call again: it would do it twice.';
  kept.message = typeof kept.message === 'string' ? `${kept.message} — ${note}` : note;
  return { ...message, result: { content: [{ type: 'text', text: JSON.stringify(kept, null, 2) }], structuredContent: kept } };
}

/**
 * Wraps a connected transport (once the server set its onmessage): messages are delivered one per
 * turn of the event loop, and an answer that would take the POST's answers past
 * BATCH_ANSWER_MAX_CHARS is replaced: by an ANSWER_TOO_LARGE error when it answers a read (a tool
 * in `readOnly`, or a method other than tools/call), by its short fields (`cut`) when the call may
 * have taken effect. The first answer always goes out whole.
 */
export function paceMessages(transport: Transport, readOnly: ReadonlySet<string>): void {
  const deliver = transport.onmessage!;
  /** tools/call requests not answered yet: id → tool name. */
  const calls = new Map<RequestId, string>();
  transport.onmessage = (message, extra) => {
    if (isJSONRPCRequest(message) && message.method === 'tools/call' && typeof message.params?.name === 'string')
      calls.set(message.id, message.params.name);
    ownTurn()
      .then(() => deliver(message, extra))
      .catch((err: Error) => transport.onerror?.(err));
  };

  const send = transport.send.bind(transport);
  let answered = 0;
  transport.send = async (message, options) => {
    if (!isJSONRPCResultResponse(message) && !isJSONRPCErrorResponse(message)) return send(message, options);
    const tool = message.id === undefined ? undefined : calls.get(message.id);
    if (message.id !== undefined) calls.delete(message.id);
    const chars = JSON.stringify(message).length;
    let out: JSONRPCMessage = message;
    if (answered > 0 && answered + chars > BATCH_ANSWER_MAX_CHARS)
      out =
        tool !== undefined && !readOnly.has(tool) && isJSONRPCResultResponse(message)
          ? cut(message, tool, chars, answered)
          : tooLarge(message.id, chars, answered);
    answered += out === message ? chars : JSON.stringify(out).length;
    // Measuring this answer and the SDK's serialising all of them (when it is the last) in separate turns.
    await ownTurn();
    return send(out, options);
  };
}
