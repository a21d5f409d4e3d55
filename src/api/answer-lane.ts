import type {
  FastifyInstance,
  FastifyRequest,
  onRequestAbortHookHandler,
  onResponseHookHandler,
  onSendHookHandler,
  preHandlerHookHandler,
} from 'fastify';
import type { z } from 'zod';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * This route's answer may carry stored values of megabytes (an execution's result, a page of
     * log lines): its handler waits for a place in the answer lane (AnswerLane), or, given a
     * function, when that function says so of the validated request.
     */
    largeAnswer?: true | ((req: FastifyRequest) => boolean);
  }
}

/**
 * Answers that may be megabytes are built this many at a time. Building one (the store's read,
 * the serialisation, the bytes counted) is tens of milliseconds of the event loop; 150 clients
 * asking at once queued all of that ahead of every other request (a `/healthz` waited seconds).
 * In the lane the loop takes other requests between two answers. One: measured with 150 such
 * clients on both stores, two at a time doubled `/healthz`'s median wait and gained PostgreSQL's
 * answers about a fifth in throughput (one's read overlapping another's serialisation).
 */
export const ANSWER_LANE_WIDTH = 1;

const enum Place {
  Waiting,
  Inside,
  Out,
}

interface Entry {
  req: FastifyRequest;
  go(): void;
  gone(err: Error): void;
}

/**
 * A waiting request whose client closed its connection before its turn: nothing is built for it.
 * Answered as a client's fault (4xx, not logged as an error) to a socket that is gone.
 */
export class ClientGone extends Error {
  readonly statusCode = 400;
  constructor() {
    super('the client closed its connection before its answer was built');
  }
}

const PLACE = Symbol('answer-lane place');
type Placed = FastifyRequest & { [PLACE]?: Place };

/**
 * A lane of `width` places for building large answers. A request takes a place before its
 * handler runs and gives it up when its answer is handed on (onSend), or when it ends any other
 * way; the next waiting request gets the place in a later turn of the event loop (setImmediate),
 * after the I/O that arrived meanwhile.
 */
export class AnswerLane {
  private inside = 0;
  private readonly waiting: Entry[] = [];

  constructor(private readonly width = ANSWER_LANE_WIDTH) {}

  /** Settles when `req` may build its answer; rejects with ClientGone if its client left first. */
  enter(req: FastifyRequest): Promise<void> {
    const placed = req as Placed;
    if (this.inside < this.width) {
      this.inside++;
      placed[PLACE] = Place.Inside;
      return Promise.resolve();
    }
    placed[PLACE] = Place.Waiting;
    return new Promise((go, gone) => this.waiting.push({ req, go, gone }));
  }

  /** `req` is done with its place (or never took one): the next waiting request may build. */
  leave(req: FastifyRequest): void {
    const placed = req as Placed;
    if (placed[PLACE] !== Place.Inside) return;
    placed[PLACE] = Place.Out;
    setImmediate(() => this.handOn());
  }

  private handOn(): void {
    for (;;) {
      const next = this.waiting.shift();
      if (!next) {
        this.inside--;
        return;
      }
      const placed = next.req as Placed;
      if (next.req.raw.socket?.destroyed) {
        placed[PLACE] = Place.Out;
        next.gone(new ClientGone());
        continue;
      }
      placed[PLACE] = Place.Inside;
      next.go();
      return;
    }
  }
}

/**
 * A `largeAnswer` predicate on the route's query as `schema` parsed it: the lane's preHandler runs
 * after validation, so the query is the schema's output, and the predicate is typed by the same
 * schema as the route's handler (a renamed or retyped parameter fails the type check here too).
 * `_schema` is read for its type only: Fastify types a route's config without its schemas.
 */
export function largeAnswerWhen<Q extends z.ZodType>(_schema: Q, when: (query: z.output<Q>) => boolean): (req: FastifyRequest) => boolean {
  return (req) => when(req.query as z.output<Q>);
}

/**
 * Routes configured with `largeAnswer` build their answers in `lane`. Their hooks are the route's
 * own (added as each such route is registered: call this before the routes), so every other route,
 * the worker protocol's included, runs none of them: no preHandler, onSend or onResponse call and
 * no listener for the request's abort on each of its requests.
 */
export function laneLargeAnswers(app: FastifyInstance, lane: AnswerLane): void {
  // Callbacks, not promises: these run for every request of such a route.
  const enter: preHandlerHookHandler = (req, _reply, done) => {
    const large = req.routeOptions.config.largeAnswer;
    if (large === undefined || (large !== true && !large(req))) return done();
    lane.enter(req).then(() => done(), done);
  };
  const leave = (req: FastifyRequest) => lane.leave(req);
  const sent: onSendHookHandler = (req, _reply, payload, done) => {
    leave(req);
    done(null, payload);
  };
  const answered: onResponseHookHandler = (req, _reply, done) => {
    leave(req);
    done();
  };
  const aborted: onRequestAbortHookHandler = (req, done) => {
    leave(req);
    done();
  };
  app.addHook('onRoute', (route) => {
    if (route.config?.largeAnswer === undefined) return;
    route.preHandler = [...hooksOf(route.preHandler), enter];
    route.onSend = [...hooksOf(route.onSend), sent];
    route.onResponse = [...hooksOf(route.onResponse), answered];
    route.onRequestAbort = [...hooksOf(route.onRequestAbort), aborted];
  });
}

/** A route option's hooks as a list (none, one, or several). */
const hooksOf = <H>(hooks: H | H[] | undefined): H[] => (hooks === undefined ? [] : Array.isArray(hooks) ? hooks : [hooks]);
