/**
 * `POST /v1/payments`: the seed's route, a plain HTTP route that moves money, built with Hono and
 * made idempotent by `@idem/fetch/hono` — the same ledger and channel as the tRPC and GraphQL
 * mutations, the whole response stored (status, body, `Location`) and replayed byte for byte.
 * `GET /v1/payments/:id` reads the ledger (a GET is never keyed).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { getRequestListener } from '@hono/node-server';
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { HTTPException } from 'hono/http-exception';
import { validator } from 'hono/validator';
import { notStarted } from '@idem/fetch';
import { idempotency } from '@idem/fetch/hono';
import { accountOf, BadCredentialsError } from './account.ts';
import {
  ChargeNotRecordedError,
  ChargeRefusedError,
  PaymentChannelTimeoutError,
  PaymentDeclinedError,
} from './channel.ts';
import { DEFAULT_MAX_BODY_BYTES, SEMANTICS } from './config.ts';
import { paymentInput, type PaymentsRouterOptions } from './trpc.ts';

export const REST_PAYMENTS_PATH = '/v1/payments';

/** `GET /v1/ledger?key=<key>`: what the ledger holds for one of the caller's idempotency keys (reservations, charges, timeouts). */
export const REST_LEDGER_PATH = '/v1/ledger';

export interface PaymentsRestOptions extends PaymentsRouterOptions {
  /** The largest request body, in bytes: 413 past it. Defaults to 64 KiB. */
  maxBodyBytes?: number;
}

type RestEnv = { Variables: { account: string } };

/** The route as a Fetch handler (`fetch`), as a Node listener (`listener`), and the engine behind it. */
export function createPaymentsRest({
  store,
  channel,
  retentionMs,
  leaseMs,
  waitMs = 0,
  onEvent,
  atomic = false,
  semantics = 'v1',
  maxBodyBytes = DEFAULT_MAX_BODY_BYTES,
}: PaymentsRestOptions) {
  const idempotent = idempotency({
    store,
    principal: (c: Context<RestEnv>) => c.get('account'),
    retention: retentionMs,
    lease: leaseMs,
    wait: waitMs,
    atomic,
    onFailure: SEMANTICS[semantics],
    maxBodyBytes,
    ...(onEvent ? { onEvent } : {}),
  });
  const app = new Hono<RestEnv>();

  // Refused before idempotency: bad credentials (401, never the public account's responses),
  // bodies over the limit (413), and input the schema refuses (400) are never stored (E4).
  const authenticate: MiddlewareHandler<RestEnv> = async (c, next) => {
    try {
      c.set('account', accountOf(c.req.header('authorization')));
    } catch (error) {
      if (!(error instanceof BadCredentialsError)) throw error;
      return problem(401, 'Unauthorized', error.message, { 'www-authenticate': 'Bearer realm="payments"' });
    }
    await next();
  };
  app.use(REST_PAYMENTS_PATH, authenticate);
  app.use(REST_LEDGER_PATH, authenticate);
  app.post(
    REST_PAYMENTS_PATH,
    standardRequest,
    bodyLimit({
      maxSize: maxBodyBytes,
      onError: () => problem(413, 'Content Too Large', `The request body is larger than ${maxBodyBytes} bytes.`),
    }),
    validator('json', (value) => {
      const parsed = paymentInput.safeParse(value);
      if (parsed.success) return parsed.data;
      const detail = parsed.error.issues.map((issue) => `${issue.path.join('.') || 'body'}: ${issue.message}`);
      return problem(400, 'Bad Request', detail.join('; '));
    }),
    idempotent,
    async (c) => {
      const input = c.req.valid('json');
      const claim = idempotent.claim(c);
      // Two steps, reserve then charge, each under a key derived from ours (a re-execution charges
      // once); in atomic mode their rows are written in idem's transaction.
      let charge;
      try {
        charge = await channel.pay(
          { account: c.get('account'), amount: input.amount, currency: input.currency },
          claim,
          {
            steps: semantics === 'v2',
          },
        );
      } catch (error) {
        // The channel timed out, nothing charged: 504, replayed (v1) or resumed by the retry (v2).
        if (error instanceof PaymentChannelTimeoutError) return problem(504, 'Gateway Timeout', error.message);
        // Declined: the client's to fix, a final failure stored and replayed in both modes.
        if (error instanceof PaymentDeclinedError) return problem(402, 'Payment Required', error.message);
        // Nothing was charged: give the key back (E4), so that the retry the 503 asks for charges.
        if (error instanceof ChargeNotRecordedError)
          return notStarted(problem(503, 'Service Unavailable', error.message, { 'retry-after': '1' }));
        // The database refused the payment's data: the client's to fix (400), nothing charged.
        if (error instanceof ChargeRefusedError) return notStarted(problem(400, 'Bad Request', error.message));
        throw error;
      }
      return c.json(charge, 201, { location: `${REST_PAYMENTS_PATH}/${charge.id}` });
    },
  );
  app.get(REST_LEDGER_PATH, async (c) => {
    const key = c.req.query('key');
    if (!key) return problem(400, 'Bad Request', 'Name the idempotency key: GET /v1/ledger?key=<key>.');
    return c.json(await channel.keyLedger(c.get('account'), key), 200, { 'cache-control': 'no-store' });
  });
  app.get(`${REST_PAYMENTS_PATH}/:id`, async (c) => {
    const entry = (await channel.ledger()).find(({ id }) => id === c.req.param('id'));
    return entry ? c.json(entry) : problem(404, 'Not Found', `No payment ${c.req.param('id')}`);
  });
  // A channel that fails after charging (amount 13) is a 500 whose answer is stored and replayed
  // (E4): the charge happened. Its message is not shown.
  app.onError((error) =>
    error instanceof HTTPException
      ? problem(error.status, error.message || 'Bad Request', error.message)
      : problem(500, 'Internal Server Error', 'The payment could not be completed.'),
  );
  app.notFound(() => problem(404, 'Not Found', 'No such route.'));

  // The lightweight Request/Response of @hono/node-server stay inside this route: Yoga and tRPC
  // share the process and its globals.
  const listener = getRequestListener(app.fetch, { overrideGlobalObjects: false });
  return {
    fetch: app.fetch,
    listener: (req: IncomingMessage, res: ServerResponse) => listener(req, res),
    engine: idempotent.engine,
    describeEndpoint: idempotent.describeEndpoint,
  };
}

/**
 * Makes the request a standard `Request` before Hono's `bodyLimit` reads it. `@hono/node-server`
 * with `overrideGlobalObjects: false` hands Hono a lightweight request that is not one: a body
 * without Content-Length (chunked: Node's `fetch` with a stream body, proxies, streaming clients)
 * makes `bodyLimit` build `new Request(c.req.raw, …)` from it, which Node's `Request` refuses (a
 * TypeError), and every such
 * payment was a 500. The body still streams, never buffered here: 413 past the limit, or success.
 */
const standardRequest: MiddlewareHandler = async (c, next) => {
  const raw = c.req.raw;
  // The lightweight request passes `instanceof Request` (its prototype is the global one's): rebuild it always.
  c.req.raw = new Request(raw.url, {
    method: raw.method,
    headers: raw.headers,
    body: raw.body,
    signal: raw.signal,
    duplex: 'half',
  } as RequestInit & { duplex: 'half' });
  await next();
};

function problem(status: number, title: string, detail: string, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify({ type: 'about:blank', title, status, detail }), {
    status,
    headers: { 'content-type': 'application/problem+json', ...headers },
  });
}
