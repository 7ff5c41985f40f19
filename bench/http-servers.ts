/**
 * The servers of the HTTP benchmark, side by side. Each plain variant does the same work — read
 * the JSON body, check it, "charge" (a constant cheap handler, so that what is measured is the
 * idempotency layer, not a ledger write), answer JSON — and differs only in what makes it
 * idempotent. The tRPC variants are the example's `payments.create` (its real channel, which
 * inserts a ledger row per charge) with idem, and the same procedure without it; the hono variants
 * are the example's plain HTTP route `POST /v1/payments` (Hono, `@idem/fetch/hono`, the same
 * channel) and the same route without idem.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import {
  makeIdempotent,
  IdempotencyAlreadyInProgressError,
  IdempotencyConfig,
} from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import { Idempotency, IdempotencyError as NodeIdempotencyError, IdempotencyErrorCodes } from '@node-idempotency/core';
import { MemoryStorageAdapter } from '@node-idempotency/storage-adapter-memory';
import { RedisStorageAdapter } from '@node-idempotency/storage-adapter-redis';
import { createClient } from '@redis/client';
import { initTRPC } from '@trpc/server';
import { createHTTPHandler } from '@trpc/server/adapters/standalone';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { validator } from 'hono/validator';
import {
  createEngine,
  defaultFingerprint,
  formatScope,
  IdempotencyError,
  MissingKeyError,
  parseIdempotencyKey,
  IDEMPOTENT_REPLAYED_HEADER,
} from '@idem/core';
import { withLocalCache } from '@idem/core/store';
import { createDrizzleStore, type DrizzleStoreOptions } from '@idem/drizzle';
import { openDatabase } from '@idem/drizzle/connect';
import type pg from 'pg';
import { PoolProbe } from './pool-probe.ts';
import { accountOf } from '../examples/payments/src/account.ts';
import { createPaymentsApp } from '../examples/payments/src/app.ts';
import { PaymentChannel } from '../examples/payments/src/channel.ts';
import { createPaymentsRest } from '../examples/payments/src/rest.ts';
import { paymentInput } from '../examples/payments/src/trpc.ts';
import { charge, type Payment } from './server-child.ts';

export const HTTP_VARIANTS = [
  'bare',
  'idem engine, SQLite',
  'idem engine, SQLite, groupCommit: false',
  'idem engine, PostgreSQL',
  'idem engine, PostgreSQL, groupCommit: false',
  'idem engine, PostgreSQL, local cache',
  'powertools, Redis',
  'node-idempotency, memory',
  'node-idempotency, Redis',
  'tRPC bare, SQLite',
  'tRPC + idem, SQLite',
  'tRPC bare, PostgreSQL',
  'tRPC + idem, PostgreSQL',
  'hono bare, SQLite',
  'hono + idem, SQLite',
  'hono bare, PostgreSQL',
  'hono + idem, PostgreSQL',
  'tRPC + idem, PostgreSQL, atomic',
  'hono + idem, PostgreSQL, atomic',
] as const;
export type HttpVariant = (typeof HTTP_VARIANTS)[number];

/** Where a variant keeps its records; the parent process creates and removes them. */
export interface ServerConfig {
  variant: HttpVariant;
  /** `file:<path>` of a migrated SQLite database. */
  sqliteUrl: string;
  /** A migrated PostgreSQL schema (`search_path` in the URL). */
  postgresUrl: string;
  redisUrl: string;
  /** Every Redis key a variant writes starts with it, so the parent can delete them. */
  redisPrefix: string;
}

export interface VariantServer {
  server: Server;
  close(): Promise<void>;
}

export async function createVariantServer(config: ServerConfig): Promise<VariantServer> {
  switch (config.variant) {
    case 'bare':
      return plain(async ({ account, input }) => ({ status: 200, body: charge(account, input) }));
    case 'idem engine, SQLite':
      return idemEngine(config.sqliteUrl);
    case 'idem engine, SQLite, groupCommit: false':
      return idemEngine(config.sqliteUrl, { groupCommit: false });
    case 'idem engine, PostgreSQL':
      return idemEngine(config.postgresUrl);
    case 'idem engine, PostgreSQL, groupCommit: false':
      return idemEngine(config.postgresUrl, { groupCommit: false });
    case 'idem engine, PostgreSQL, local cache':
      return idemEngine(config.postgresUrl, {}, { localCache: true });
    case 'powertools, Redis':
      return powertools(config);
    case 'node-idempotency, memory':
      return nodeIdempotency(new MemoryStorageAdapter(), config.redisPrefix, async () => {});
    case 'node-idempotency, Redis': {
      const adapter = new RedisStorageAdapter({ url: config.redisUrl });
      await adapter.connect();
      return nodeIdempotency(adapter, config.redisPrefix, () => adapter.disconnect());
    }
    case 'tRPC bare, SQLite':
      return trpcBare(config.sqliteUrl);
    case 'tRPC + idem, SQLite':
      return trpcWithIdem(config.sqliteUrl);
    case 'tRPC bare, PostgreSQL':
      return trpcBare(config.postgresUrl);
    case 'tRPC + idem, PostgreSQL':
      return trpcWithIdem(config.postgresUrl);
    case 'hono bare, SQLite':
      return honoBare(config.sqliteUrl);
    case 'hono + idem, SQLite':
      return honoWithIdem(config.sqliteUrl);
    case 'hono bare, PostgreSQL':
      return honoBare(config.postgresUrl);
    case 'hono + idem, PostgreSQL':
      return honoWithIdem(config.postgresUrl);
    case 'tRPC + idem, PostgreSQL, atomic':
      return trpcWithIdem(config.postgresUrl, { atomic: true });
    case 'hono + idem, PostgreSQL, atomic':
      return honoWithIdem(config.postgresUrl, { atomic: true });
  }
}

interface ParsedRequest {
  account: string;
  /** The raw `Idempotency-Key` header. */
  keyHeader: string | string[] | undefined;
  input: Payment;
}

type Reply = { status: number; body: unknown; headers?: Record<string, string> };

/** A plain node:http server: body parsing, input check and replies shared by every plain variant. */
function plain(
  handle: (request: ParsedRequest) => Promise<Reply>,
  close: () => Promise<void> = async () => {},
): VariantServer {
  const server = createServer((req, res) => {
    void (async () => {
      const input = parsePayment(await readBody(req));
      if (!input)
        return send(res, {
          status: 400,
          body: { error: 'amount must be a positive integer and currency 3 uppercase letters' },
        });
      try {
        send(
          res,
          await handle({
            account: accountOf(req.headers.authorization),
            keyHeader: req.headers['idempotency-key'],
            input,
          }),
        );
      } catch (error) {
        send(res, { status: 500, body: { error: error instanceof Error ? error.message : String(error) } });
      }
    })();
  });
  return { server, close };
}

/** idem's engine called directly, as the adapters call it: key (K1–K3), scope (S1), fingerprint (F1). */
async function idemEngine(
  url: string,
  options: DrizzleStoreOptions = {},
  { localCache = false }: { localCache?: boolean } = {},
): Promise<VariantServer> {
  const database = await openBenchDatabase(url);
  const store = createDrizzleStore(database.db, options);
  const engine = createEngine({ store: localCache ? withLocalCache(store) : store });
  return plain(
    async ({ account, keyHeader, input }) => {
      try {
        const key = parseIdempotencyKey(keyHeader);
        if (key === undefined) throw new MissingKeyError();
        const result = await engine.execute(
          { scope: formatScope('payments.create', account), key, fingerprint: defaultFingerprint(input) },
          () => charge(account, input),
        );
        const headers = result.replayed ? { [IDEMPOTENT_REPLAYED_HEADER]: 'true' } : undefined;
        if (result.ok) return { status: 200, body: result.value, ...(headers ? { headers } : {}) };
        return { status: 500, body: { error: String(result.error) } };
      } catch (error) {
        if (error instanceof IdempotencyError)
          return { status: error.status, body: error.toProblem(), headers: error.headers() };
        throw error;
      }
    },
    async () => {
      await engine.drain();
      await database.close();
    },
  );
}

/**
 * Powertools' `makeIdempotent` over its Redis persistence layer. `keyPrefix` is set (outside
 * Lambda the prefix would come from `AWS_LAMBDA_FUNCTION_NAME`, unset here), and a lease
 * context is registered: without `getRemainingTimeInMillis` the in-progress record has no
 * expiry and powertools treats a concurrent duplicate as an orphan and runs it again.
 * Payload validation (`payloadValidationJmesPath`) is left off: with this persistence layer the
 * completed record loses its payload hash, so every replay fails validation (checked with
 * 2.35.0) — powertools here does less than idem, which checks a fingerprint.
 */
async function powertools(config: ServerConfig): Promise<VariantServer> {
  const client = await createClient({ url: config.redisUrl }).connect();
  const idempotencyConfig = new IdempotencyConfig({ eventKeyJmesPath: '[account, key]', expiresAfterSeconds: 86_400 });
  const leaseContext = { getRemainingTimeInMillis: () => 30_000 };
  idempotencyConfig.registerLambdaContext(
    leaseContext as unknown as Parameters<IdempotencyConfig['registerLambdaContext']>[0],
  );
  const chargeOnce = makeIdempotent(
    async (request: { account: string; key: string; input: Payment }) => charge(request.account, request.input),
    {
      persistenceStore: new CachePersistenceLayer({ client }),
      config: idempotencyConfig,
      keyPrefix: `${config.redisPrefix}powertools`,
    },
  );
  return plain(
    async ({ account, keyHeader, input }) => {
      const key = typeof keyHeader === 'string' ? keyHeader.trim() : '';
      if (key === '') return { status: 400, body: { error: 'Idempotency-Key is required' } };
      try {
        return { status: 200, body: await chargeOnce({ account, key, input }) };
      } catch (error) {
        if (error instanceof IdempotencyAlreadyInProgressError)
          return { status: 409, body: { error: error.message }, headers: { 'Retry-After': '1' } };
        throw error;
      }
    },
    async () => {
      await client.quit();
    },
  );
}

/** `@node-idempotency/core`: `onRequest` before the handler, `onResponse` after it. */
function nodeIdempotency(
  storage: ConstructorParameters<typeof Idempotency>[0],
  redisPrefix: string,
  disconnect: () => Promise<void>,
): VariantServer {
  const idempotency = new Idempotency(storage, {
    cacheKeyPrefix: `${redisPrefix}node-idempotency`,
    enforceIdempotency: true,
    cacheTTLMS: 86_400_000,
  });
  return plain(async ({ account, keyHeader, input }) => {
    // The principal is part of the path so that keys are scoped per account, as idem's are (S1).
    const request = {
      method: 'POST',
      path: `/${account}/payments.create`,
      headers: { 'idempotency-key': keyHeader },
      body: { ...input },
    };
    try {
      const stored = await idempotency.onRequest(request);
      if (stored)
        return {
          status: Number(stored.additional?.status ?? 200),
          body: stored.body,
          headers: { [IDEMPOTENT_REPLAYED_HEADER]: 'true' },
        };
    } catch (error) {
      if (error instanceof NodeIdempotencyError)
        return { status: nodeIdempotencyStatus(error.code), body: { error: error.message } };
      throw error;
    }
    const body = charge(account, input);
    await idempotency.onResponse(request, { body, additional: { status: 200 } });
    return { status: 200, body };
  }, disconnect);
}

function nodeIdempotencyStatus(code: IdempotencyErrorCodes): number {
  if (code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS) return 409;
  if (code === IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH) return 422;
  return 400;
}

/** The example app: tRPC at /trpc with idem's middleware, over the example's channel. */
async function trpcWithIdem(url: string, { atomic = false }: { atomic?: boolean } = {}): Promise<VariantServer> {
  const database = await openBenchDatabase(url);
  const app = createPaymentsApp({ db: database.db, retentionMs: 86_400_000, leaseMs: 30_000, atomic });
  await app.channel.migrate();
  return {
    server: app.server,
    async close() {
      await app.drain();
      await database.close();
    },
  };
}

/** The example's `payments.create` without idem: same input schema, same channel, same context. */
async function trpcBare(url: string): Promise<VariantServer> {
  const database = await openBenchDatabase(url);
  const channel = new PaymentChannel(database.db);
  await channel.migrate();
  const t = initTRPC.context<{ account: string }>().create({ isDev: false });
  const router = t.router({
    payments: t.router({
      create: t.procedure.input(paymentInput).mutation(({ input, ctx }) =>
        // The example's payment without a claim: its reservation, then its charge (as + idem runs them).
        channel.pay({ account: ctx.account, amount: input.amount, currency: input.currency }, undefined),
      ),
    }),
  });
  const handler = createHTTPHandler({
    router,
    createContext: ({ req }) => ({ account: accountOf(req.headers.authorization) }),
    basePath: '/trpc/',
  });
  const server = createServer((req, res) => void handler(req, res));
  return { server, close: () => database.close() };
}

/** The example's `POST /v1/payments` (Hono, `@idem/fetch/hono`), over its channel. */
async function honoWithIdem(url: string, { atomic = false }: { atomic?: boolean } = {}): Promise<VariantServer> {
  const database = await openBenchDatabase(url);
  const channel = new PaymentChannel(database.db);
  await channel.migrate();
  const rest = createPaymentsRest({
    store: createDrizzleStore(database.db),
    channel,
    retentionMs: 86_400_000,
    leaseMs: 30_000,
    atomic,
  });
  const server = createServer((req, res) => void rest.listener(req, res));
  return {
    server,
    async close() {
      await rest.engine.drain();
      await database.close();
    },
  };
}

/** The same route without idem: the same authentication, body limit, validation, channel and answer. */
async function honoBare(url: string): Promise<VariantServer> {
  const database = await openBenchDatabase(url);
  const channel = new PaymentChannel(database.db);
  await channel.migrate();
  const app = new Hono<{ Variables: { account: string } }>();
  app.post(
    '/v1/payments',
    async (c, next) => {
      c.set('account', accountOf(c.req.header('authorization')));
      await next();
    },
    bodyLimit({ maxSize: 64 * 1024 }),
    validator('json', (value, c) => {
      const parsed = paymentInput.safeParse(value);
      return parsed.success ? parsed.data : c.json({ error: parsed.error.message }, 400);
    }),
    async (c) => {
      const input = c.req.valid('json');
      // The example's payment without a claim: its reservation, then its charge (as + idem runs them).
      const charge = await channel.pay(
        { account: c.get('account'), amount: input.amount, currency: input.currency },
        undefined,
      );
      return c.json(charge, 201, { location: `/v1/payments/${charge.id}` });
    },
  );
  const listener = getRequestListener(app.fetch, { overrideGlobalObjects: false });
  const server = createServer((req, res) => void listener(req, res));
  return { server, close: () => database.close() };
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function parsePayment(text: string): Payment | undefined {
  try {
    const value = JSON.parse(text) as Partial<Payment>;
    if (
      Number.isInteger(value.amount) &&
      (value.amount as number) > 0 &&
      typeof value.currency === 'string' &&
      /^[A-Z]{3}$/.test(value.currency)
    ) {
      return { amount: value.amount as number, currency: value.currency };
    }
  } catch {
    // Falls through to the 400.
  }
  return undefined;
}

function send(res: ServerResponse, { status, body, headers = {} }: Reply): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/**
 * Development only: `BENCH_POOL_PROBE=<file>` counts each PostgreSQL variant's statements at its
 * `pg.Pool` (`pool-probe.ts`); `http-server-process.ts` appends them to the file, one line per
 * `'cpu'` request, so the line after a load holds that load's statements.
 */
export const poolProbes: PoolProbe[] = [];

async function openBenchDatabase(url: string) {
  const database = await openDatabase(url, benchPool());
  if (process.env.BENCH_POOL_PROBE && database.driver === 'node-postgres')
    poolProbes.push(new PoolProbe((database.db as unknown as { $client: pg.Pool }).$client));
  return database;
}

/**
 * Development only: `BENCH_POOL_SIZE=32` opens every server's PostgreSQL pool with that many
 * connections instead of `openDatabase`'s default (10), to measure pool sizing (issue 34).
 */
function benchPool(): { max?: number } {
  const size = Number(process.env.BENCH_POOL_SIZE);
  return Number.isInteger(size) && size > 0 ? { max: size } : {};
}
