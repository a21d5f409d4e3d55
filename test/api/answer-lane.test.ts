/**
 * Large answers are built a few at a time (src/api/answer-lane.ts), so that while many clients
 * wait for megabyte answers the event loop takes other requests between them. Checked here: a
 * real Fastify app never has more than the lane's width of large handlers at work, requests of
 * other routes are not held, a place passes on in a later turn of the loop, and nothing is built
 * for a client that left while it waited. (test/api/slow-readers.test.ts prints the /healthz
 * latency of a real server under 150 such clients.)
 */
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { ANSWER_LANE_WIDTH, AnswerLane, ClientGone, laneLargeAnswers } from '../../src/api/answer-lane.ts';

const turn = () => new Promise((r) => setImmediate(r));

describe('answer lane', () => {
  let app: FastifyInstance | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  /** An app whose large route holds its handler until `open()`; counts the handlers at work at once. */
  async function serve(lane: boolean) {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const seen = { building: 0, most: 0, small: 0 };
    app = Fastify();
    if (lane) laneLargeAnswers(app, new AnswerLane());
    app.get('/large', { config: { largeAnswer: true } }, async () => {
      seen.most = Math.max(seen.most, ++seen.building);
      await gate;
      seen.building--;
      return { ok: true };
    });
    app.get('/small', async () => {
      seen.small++;
      return { ok: true };
    });
    await app.ready();
    return { seen, open };
  }

  it('has at most its width of large answers at work, and holds no other route', async () => {
    const { seen, open } = await serve(true);
    const large = Array.from({ length: 10 }, () => app!.inject('/large'));
    for (let i = 0; i < 5; i++) await turn();
    expect(seen.most).toBe(ANSWER_LANE_WIDTH);
    expect((await app!.inject('/small')).statusCode).toBe(200);
    open();
    expect((await Promise.all(large)).map((r) => r.statusCode)).toEqual(Array(10).fill(200));
    expect(seen.most).toBe(ANSWER_LANE_WIDTH);
  });

  it('without the lane every large handler is at work at once (the check above can fail)', async () => {
    const { seen, open } = await serve(false);
    const large = Array.from({ length: 10 }, () => app!.inject('/large'));
    for (let i = 0; i < 5; i++) await turn();
    open();
    await Promise.all(large);
    expect(seen.most).toBe(10);
  });

  it("runs its hooks on the large routes alone: another route's requests call none of them", async () => {
    await serve(true);
    // Each route's lines of the printout: its name, then one line per kind of hook it runs.
    const routes = new Map<string, string[]>();
    let at: string[] = [];
    for (const line of app!.printRoutes({ includeHooks: true, commonPrefix: false }).split('\n')) {
      const route = /(\/\w+ \((?:GET|HEAD)\))/.exec(line)?.[1];
      if (route) routes.set(route, (at = []));
      else if (line.includes('•')) at.push(line.slice(line.indexOf('•') + 2));
    }
    // The large route's own hooks: the place taken before its handler, given up however it ends.
    expect(routes.get('/large (GET)')).toEqual([
      '(preHandler) ["enter()"]',
      '(onSend) ["sent()"]',
      '(onResponse) ["answered()"]',
      '(onRequestAbort) ["aborted()"]',
    ]);
    // The small route: no lane hook, so none of its requests pays for one (nor listens for its abort).
    expect(routes.get('/small (GET)')).toEqual([]);
  });

  const request = (destroyed = false) => ({ raw: { socket: { destroyed } } }) as unknown as FastifyRequest;

  it('passes a place on in a later turn of the event loop, after what was already queued', async () => {
    const lane = new AnswerLane(1);
    const first = request();
    await lane.enter(first);
    const order: string[] = [];
    const second = lane.enter(request()).then(() => order.push('second builds'));
    setImmediate(() => order.push('queued before the leave'));
    lane.leave(first);
    await Promise.resolve();
    expect(order).toEqual([]);
    await second;
    expect(order).toEqual(['queued before the leave', 'second builds']);
  });

  it('builds nothing for a waiting request whose client left, and the next one gets the place', async () => {
    const lane = new AnswerLane(1);
    const first = request();
    await lane.enter(first);
    const gone = request();
    const left = lane.enter(gone);
    const next = lane.enter(request());
    (gone.raw.socket as { destroyed: boolean }).destroyed = true;
    lane.leave(first);
    await expect(left).rejects.toBeInstanceOf(ClientGone);
    await expect(next).resolves.toBeUndefined();
  });
});
