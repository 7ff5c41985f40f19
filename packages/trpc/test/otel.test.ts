/**
 * `@idem/core/otel` under the tRPC middleware, over real HTTP, on the Drizzle store on SQLite: each
 * request runs inside a server span (as an HTTP instrumentation starts it), and the real SDK's
 * in-memory exporters show what idem counted and what it said on the span, for a fresh call, a
 * replay, a conflict and a mismatch.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { initTRPC } from '@trpc/server';
import { createHTTPHandler } from '@trpc/server/adapters/standalone';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { IDEMPOTENCY_DURATION_METRIC, IDEMPOTENCY_EVENTS_METRIC, idempotencyTelemetry } from '@idem/core/otel';
import type { HistogramMetricData } from '@opentelemetry/sdk-metrics';
import { counted, useOpenTelemetrySdk } from '../../core/test/otel-sdk.ts';
import { idempotency, idempotencyContext, idempotencyErrorFormatter, type IdempotencyContext } from '../src/index.ts';
import { mutate, newKey } from './http.ts';
import { sqliteTarget } from './stores.ts';

const sdk = useOpenTelemetrySdk();

interface Context extends IdempotencyContext {
  user: string;
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function startApp({ required = true }: { required?: boolean } = {}) {
  const { store, close } = await sqliteTarget.open();
  cleanups.push(close);
  let gate: Promise<void> = Promise.resolve();
  let started = () => {};
  const runs = { count: 0 };
  const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
  const idempotent = idempotency({
    store,
    principal: (ctx: Context) => ctx.user,
    required,
    onEvent: idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test') }),
  });
  const router = t.router({
    createOrder: t.procedure
      .input(z.object({ amount: z.number() }))
      .use(idempotent)
      .mutation(async ({ input }) => {
        runs.count++;
        started();
        await gate;
        return { orderId: `ord_${runs.count}`, amount: input.amount };
      }),
  });
  const handle = createHTTPHandler({
    router,
    createContext: (opts) => ({ user: String(opts.req.headers['x-user'] ?? 'alice'), ...idempotencyContext(opts) }),
  });
  // What an HTTP instrumentation does: one active server span per request, ended with the response.
  const server = createServer((req, res) =>
    sdk.tracer.startActiveSpan(`${req.method} ${req.headers['x-test-request']}`, (span) => {
      res.on('finish', () => span.end());
      handle(req, res);
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    runs,
    /** Holds the resolver until the returned function is called; `running` resolves once it runs. */
    hold() {
      let release!: () => void;
      gate = new Promise<void>((resolve) => (release = resolve));
      const running = new Promise<void>((resolve) => (started = resolve));
      return { running, release };
    },
    call: (name: string, key: string | undefined, amount: number) =>
      mutate(
        url,
        'createOrder',
        { amount },
        { ...(key === undefined ? {} : { 'idempotency-key': key }), 'x-user': 'principal-42', 'x-test-request': name },
      ),
  };
}

function spanAttributes(name: string) {
  const span = sdk.spans.getFinishedSpans().find((each) => each.name === `POST ${name}`);
  expect(span, `the span of ${name}`).toBeDefined();
  return span!.attributes;
}

describe('@idem/core/otel with @idem/trpc over HTTP (SQLite)', () => {
  it('a fresh call, its replay, a conflict and a mismatch: counters by event and procedure, spans that say replayed or not', async () => {
    const app = await startApp();
    const key = newKey();
    const held = app.hold();
    const fresh = app.call('fresh', key, 10);
    await held.running;
    const conflict = await app.call('conflict', key, 10);
    held.release();
    const executed = await fresh;
    const replay = await app.call('replay', key, 10);
    const mismatch = await app.call('mismatch', key, 99);

    expect([executed.status, conflict.status, replay.status, mismatch.status]).toEqual([200, 409, 200, 422]);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(app.runs.count).toBe(1);

    const base = { 'idempotency.key_present': true, 'idempotency.operation': 'createOrder' };
    expect(spanAttributes('fresh')).toEqual({
      ...base,
      'idempotency.replayed': false,
      'idempotency.outcome': 'executed',
    });
    expect(spanAttributes('replay')).toEqual({
      ...base,
      'idempotency.replayed': true,
      'idempotency.outcome': 'replayed',
    });
    expect(spanAttributes('conflict')).toEqual({ ...base, 'idempotency.outcome': 'conflict' });
    expect(spanAttributes('mismatch')).toEqual({ ...base, 'idempotency.outcome': 'mismatch' });

    const metrics = await sdk.collected();
    expect(counted(metrics.get(IDEMPOTENCY_EVENTS_METRIC))).toEqual([
      'claimed createOrder = 1',
      'completed createOrder = 1',
      'conflict createOrder = 1',
      'mismatch createOrder = 1',
      'replayed createOrder = 1',
    ]);
    const duration = metrics.get(IDEMPOTENCY_DURATION_METRIC) as HistogramMetricData;
    expect(duration.dataPoints.map(({ attributes, value }) => [attributes, value.count])).toEqual([
      [{ 'idempotency.operation': 'createOrder', 'idempotency.outcome_kind': 'success' }, 1],
    ]);
    // K5 and cardinality: neither the principal nor the key reaches an attribute.
    const exported = JSON.stringify([
      sdk.spans.getFinishedSpans().map((span) => span.attributes),
      [...metrics.values()].map((metric) => metric.dataPoints),
    ]);
    expect(exported).not.toContain('principal-42');
    expect(exported).not.toContain(key);
  });

  it('K2: a mutation without a key says key_present false on its span, refused (key_missing) or run without idempotency (unkeyed)', async () => {
    for (const required of [true, false]) {
      sdk.spans.reset();
      const app = await startApp({ required });
      const answer = await app.call(`unkeyed-${required}`, undefined, 10);
      expect(answer.status).toBe(required ? 400 : 200);
      expect(app.runs.count).toBe(required ? 0 : 1);
      expect(spanAttributes(`unkeyed-${required}`)).toEqual({
        'idempotency.key_present': false,
        'idempotency.operation': 'createOrder',
        'idempotency.replayed': false,
        'idempotency.outcome': required ? 'key_missing' : 'unkeyed',
      });
    }
    const metrics = await sdk.collected();
    const points = metrics
      .get(IDEMPOTENCY_EVENTS_METRIC)!
      .dataPoints.map(({ attributes, value }) => [attributes, value]);
    expect(points).toEqual([
      [{ 'idempotency.event': 'unkeyed', 'idempotency.operation': 'createOrder', 'idempotency.refused': true }, 1],
      // Run without a key in an app that saw no other request: no operation label of its own.
      [{ 'idempotency.event': 'unkeyed', 'idempotency.operation': '(other)', 'idempotency.refused': false }, 1],
    ]);
  });
});
