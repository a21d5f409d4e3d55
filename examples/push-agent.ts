/**
 * A minimal HTTP push agent: Baton POSTs each task here, and the answer decides the outcome.
 *
 *   PORT=8080 PUSH_SECRET=a-long-random-secret-value npx tsx examples/push-agent.ts
 *   npx baton agents create hello --delivery push --push-url http://127.0.0.1:8080/task \
 *     --push-secret a-long-random-secret-value
 *   npx baton run hello "say hello" --wait
 *
 * Request: JSON {execution_id, attempt, agent, message, payload, deadline}; headers
 * Idempotency-Key (= execution id: a repeat after a crash carries the same one), X-Baton-Attempt,
 * X-Baton-Signature: sha256=<HMAC-SHA256 of the raw body> when the agent has a secret.
 * Answer: 2xx {status: "succeeded"|"failed"|"cancelled", result, error, usage}; a 4xx fails the
 * task (not re-delivered); a 5xx, a timeout or a connection error fails it with a clear code.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

const secret = process.env.PUSH_SECRET;
const seen = new Map<string, unknown>(); // Idempotency-Key → answer: a re-delivery gets the same one

function signatureOk(body: string, header: string | undefined): boolean {
  if (!secret) return true;
  const expected = Buffer.from(`sha256=${createHmac('sha256', secret).update(body).digest('hex')}`);
  const given = Buffer.from(header ?? '');
  return given.length === expected.length && timingSafeEqual(given, expected);
}

const server = createServer((req, res) => {
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (c) => (body += c));
  req.on('end', () => {
    const reply = (status: number, data: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(data));
    };
    if (!signatureOk(body, req.headers['x-baton-signature'] as string | undefined)) return reply(401, { error: 'bad signature' });
    const key = String(req.headers['idempotency-key']);
    if (seen.has(key)) return reply(200, seen.get(key));
    const task = JSON.parse(body) as { message: string; attempt: number };
    const answer = {
      status: 'succeeded',
      result: { reply: `hello! you said: ${task.message}`, attempt: task.attempt },
      usage: { input_tokens: task.message.length, output_tokens: 12, cost_usd: 0 },
    };
    seen.set(key, answer);
    reply(200, answer);
  });
});
server.listen(Number(process.env.PORT ?? 8080), '127.0.0.1', () =>
  console.error(`push agent on http://127.0.0.1:${process.env.PORT ?? 8080}/task`),
);
