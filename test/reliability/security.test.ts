/**
 * Scenario 5, security (S1, K5, E4): over real HTTP against the payments example, another
 * principal sending the same key and payload runs its own execution and never receives the
 * first principal's response; no problem body (400/409/422/503) and no `[idem]` log line
 * carries a stored response body. And `maxStoredBytes`: an outcome too large to store still
 * reaches the client that ran the handler, and a retry learns that the request was executed.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryStore } from '@idem/core';
import { ExampleFleet, type ExampleServer } from './support/example-server.ts';
import { POSTGRES_SCHEMA, postgresAddress, SQLITE_FILE, type SharedDatabase } from './support/databases.ts';
import { PAYMENT_ENDPOINTS, ledger, type PaymentEndpoint } from './support/payments.ts';
import { createCountingApp, graphqlOrders, IN_PROCESS, trpcOrders } from './support/counting-app.ts';
import { startTcpProxy, type TcpProxy } from './support/tcp-proxy.ts';
import type { Answer } from './support/http.ts';

const KEY_PLACES = ['header', 'input'] as const;
const input = { amount: 2500, currency: 'EUR' };

/** What a stored body holds that nothing else says: the payment id, its timestamp, a stored error's message. */
function storedSecrets(endpoint: PaymentEndpoint, answers: readonly Answer[]): string[] {
  return answers.flatMap((answer) => {
    const payment = endpoint.payment(answer);
    return payment ? [payment.id, payment.createdAt] : [];
  });
}

function expectNoSecretIn(texts: readonly string[], secrets: readonly string[], what: string) {
  expect(secrets.length, 'secrets to look for').toBeGreaterThan(0);
  for (const text of texts)
    for (const secret of secrets)
      expect(text.includes(secret), `${what} contains the stored "${secret}": ${text.slice(0, 300)}`).toBe(false);
}

describe('S1 and problem bodies against the payments example (SQLite)', () => {
  const fleet = new ExampleFleet();
  let database: SharedDatabase;
  let server: ExampleServer;
  /** The same example on the same database with a channel that takes a minute: its claims stay in flight for the 409 (E3). */
  let holding: ExampleServer;
  /** Every body stored so far (payment ids, timestamps, error messages). */
  const secrets: string[] = [];

  beforeAll(async () => {
    database = await SQLITE_FILE.open();
    [server, holding] = await Promise.all([
      fleet.start({ databaseUrl: database.url, channelDelayMs: 400, name: 'payments (security)' }),
      fleet.start({ databaseUrl: database.url, channelDelayMs: 60_000, name: 'payments (holding a claim)' }),
    ]);
  }, 120_000);

  afterAll(async () => {
    await fleet.killAll();
    await database?.close();
  });

  describe.each(PAYMENT_ENDPOINTS)('$name', (endpoint) => {
    it.each(KEY_PLACES)(
      'S1 (key in the %s): the same key and payload from another principal executes on its own; each principal only ever gets its own payment',
      async (keyIn) => {
        const key = `s1-${randomUUID()}`;
        const before = (await ledger(server.url)).length;
        const alice = await endpoint.create(server.url, input, { key, keyIn, account: 'alice' });
        const bob = await endpoint.create(server.url, input, { key, keyIn, account: 'bob' });
        expect([alice.status, alice.replayed, bob.status, bob.replayed]).toEqual([200, false, 200, false]);
        const alicePayment = endpoint.payment(alice)!;
        const bobPayment = endpoint.payment(bob)!;
        expect(bobPayment.id).not.toBe(alicePayment.id);
        secrets.push(...storedSecrets(endpoint, [alice, bob]));

        // Interleaved retries of both: each gets its own stored payment back, never the other's.
        const retries = await Promise.all(
          Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? 'alice' : 'bob')).map(async (account) => ({
            account,
            answer: await endpoint.create(server.url, input, { key, keyIn, account }),
          })),
        );
        for (const { account, answer } of retries) {
          expect(answer.replayed).toBe(true);
          expect(endpoint.payment(answer)).toEqual(account === 'alice' ? alicePayment : bobPayment);
          expect(answer.text).not.toContain(account === 'alice' ? bobPayment.id : alicePayment.id);
        }
        expect((await ledger(server.url)).length - before).toBe(2);
        expect(await database.store.get(endpoint.scope('alice', keyIn), key)).toMatchObject({ state: 'completed' });
        expect(await database.store.get(endpoint.scope('bob', keyIn), key)).toMatchObject({ state: 'completed' });
      },
    );

    it("S1 under concurrency: 10 + 10 simultaneous first requests of two principals with one key run exactly two executions, one per principal, and nobody gets the other's payment", async () => {
      const key = `s1-race-${randomUUID()}`;
      const before = (await ledger(server.url)).length;
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? 'carol' : 'dave')).map(async (account) => ({
          account,
          answer: await endpoint.create(server.url, input, { key, account }),
        })),
      );
      expect(answers.map(({ answer }) => answer.status).filter((status) => status !== 200 && status !== 409)).toEqual(
        [],
      );
      const executed = answers.filter(({ answer }) => answer.status === 200 && !answer.replayed);
      expect(executed.map(({ account }) => account).sort()).toEqual(['carol', 'dave']);
      // What each principal's executing request was told, checked against oracles of its own:
      // the channel's ledger, and replays sent once both executions completed.
      const told = Object.fromEntries(executed.map(({ account, answer }) => [account, endpoint.payment(answer)!]));
      expect(told.carol!.id).not.toBe(told.dave!.id);
      expect(
        (await ledger(server.url))
          .slice(before)
          .map((entry) => entry.id)
          .sort(),
      ).toEqual([told.carol!.id, told.dave!.id].sort());
      const replays = [];
      for (const account of ['carol', 'dave', 'carol', 'dave'])
        replays.push({ account, answer: await endpoint.create(server.url, input, { key, account }) });
      // The replays of the race itself (there may be none: the others may all have been 409s), then these.
      for (const { account, answer } of [
        ...answers.filter(({ answer }) => answer.status === 200 && answer.replayed),
        ...replays,
      ]) {
        expect([answer.status, answer.replayed]).toEqual([200, true]);
        expect(endpoint.payment(answer)).toEqual(told[account]);
      }
      secrets.push(...Object.values(told).flatMap((payment) => [payment.id, payment.createdAt]));
    });

    it('K5/E3/F3/K3/K4: 400, 409 and 422 problem bodies never contain a stored response body', async () => {
      const key = `problems-${randomUUID()}`;
      const stored = await endpoint.create(server.url, input, { key, account: 'erin' });
      expect(stored.status).toBe(200);
      const failedKey = `problems-13-${randomUUID()}`;
      const failed = await endpoint.create(
        server.url,
        { amount: 13, currency: 'SEK' },
        { key: failedKey, account: 'erin' },
      );
      const storedError = 'payment channel failed unexpectedly after charging 13 SEK';
      expect(failed.text).toContain(storedError);
      const mine = [...storedSecrets(endpoint, [stored]), storedError];
      secrets.push(...mine);

      // In flight on the holding server for a minute (its lease: 30 s), whatever the machine's load.
      const inFlightKey = `problems-409-${randomUUID()}`;
      const first = endpoint.create(holding.url, input, { key: inFlightKey, account: 'erin' });
      first.catch(() => {}); // answered never: the holding server is killed in afterAll
      await holding.waitForEvent((event) => event.type === 'claimed' && event.key === inFlightKey);
      const problems = await Promise.all([
        endpoint.create(server.url, { amount: 2501, currency: 'EUR' }, { key, account: 'erin' }), // 422, the record holds a body
        endpoint.create(server.url, { amount: 14, currency: 'SEK' }, { key: failedKey, account: 'erin' }), // 422 on the stored error
        endpoint.create(server.url, input, { key: `${key} `.repeat(2), account: 'erin' }), // 400 invalid
        endpoint.create(server.url, input, { key: 'k'.repeat(256), account: 'erin' }), // 400 too long
        endpoint.create(server.url, input, { account: 'erin' }), // 400 missing
        endpoint.create(server.url, input, { key: inFlightKey, account: 'erin' }), // 409
      ]);
      expect(problems.map((answer) => answer.status)).toEqual([422, 422, 400, 400, 400, 409]);
      expectNoSecretIn(
        problems.map((answer) => answer.text),
        secrets,
        'a problem body',
      );
    });
  });

  it('K5: no [idem] log line of the example server contains a stored response body', () => {
    const idemLines = server.lines.filter((line) => line.startsWith('[idem] '));
    expect(idemLines.length).toBeGreaterThan(50);
    expectNoSecretIn(idemLines, [...new Set(secrets), 'failed unexpectedly'], 'an [idem] log line');
    console.info(
      `[reliability] security: ${idemLines.length} [idem] lines checked against ${new Set(secrets).size} stored values`,
    );
  });
});

describe.skipIf(!POSTGRES_SCHEMA.available)(
  '503 problem bodies and log lines with PostgreSQL unreachable (example behind a TCP proxy)',
  () => {
    const fleet = new ExampleFleet();
    let database: SharedDatabase;
    let proxy: TcpProxy;
    let server: ExampleServer;

    beforeAll(async () => {
      database = await POSTGRES_SCHEMA.open();
      proxy = await startTcpProxy(postgresAddress());
      server = await fleet.start({ databaseUrl: proxy.urlFor(database.url), name: 'payments (behind a proxy)' });
    });

    afterAll(async () => {
      await fleet.killAll();
      await proxy?.close();
      await database?.close();
    });

    it('E5/K5: with the store unreachable, retries of stored keys get 503 + Retry-After whose bodies, like every [idem] line, hold no stored body', async () => {
      const stored = await Promise.all(
        PAYMENT_ENDPOINTS.map(async (endpoint) => {
          const key = `e5-${randomUUID()}`;
          const answer = await endpoint.create(server.url, input, { key, account: 'frank' });
          expect(answer.status).toBe(200);
          return { endpoint, key, answer };
        }),
      );
      const secrets = stored.flatMap(({ endpoint, answer }) => storedSecrets(endpoint, [answer]));

      proxy.refuseNewConnections();
      proxy.destroyOpenSockets();
      const unavailable = await Promise.all(
        stored.map(({ endpoint, key }) => endpoint.create(server.url, input, { key, account: 'frank' })),
      );
      proxy.passThrough();

      expect(unavailable.map((answer) => [answer.status, answer.retryAfter])).toEqual([
        [503, '2'],
        [503, '2'],
      ]);
      expectNoSecretIn(
        unavailable.map((answer) => answer.text),
        secrets,
        'a 503 body',
      );
      await server.settled();
      const storeErrors = server.events.filter((event) => event.type === 'storeError');
      expect(storeErrors.length).toBeGreaterThanOrEqual(2);
      expectNoSecretIn(
        server.lines.filter((line) => line.startsWith('[idem] ')),
        secrets,
        'an [idem] log line',
      );

      // And the service is back without a restart: the stored outcomes replay.
      const replays = await Promise.all(
        stored.map(({ endpoint, key }) => endpoint.create(server.url, input, { key, account: 'frank' })),
      );
      expect(replays.map((answer) => answer.replayed)).toEqual([true, true]);
    });

    it('K5: a storeError log line for a failed outcome write (E7) does not contain the stored response body', async () => {
      // The store rethrows drizzle's query errors without the statement's parameters (StoreQueryError).
      for (const endpoint of PAYMENT_ENDPOINTS) {
        const key = `k5-${randomUUID()}`;
        proxy.dropWhenClientSends('idem:complete:');
        const answer = await endpoint.create(server.url, input, { key, account: 'ivan' });
        expect(answer.status).toBe(200); // E7: the real outcome, though it was not stored
        const failure = await server.waitForEvent(
          (event) => event.type === 'storeError' && event.key === key && event.storeOperation === 'complete',
        );
        proxy.clearDropRules();
        const line = server.lines.find(
          (candidate) =>
            candidate.startsWith('[idem] ') && candidate.includes('"storeError"') && candidate.includes(key),
        );
        expect(line, 'the storeError line').toBeDefined();
        expect(JSON.stringify(failure)).toContain('[idem] store query failed');
        expectNoSecretIn([line!], storedSecrets(endpoint, [answer]), 'a storeError line');
        expect(line).not.toContain('params');
      }
    });
  },
);

describe('maxStoredBytes: an outcome larger than the store takes', () => {
  const MAX_STORED_BYTES = 256;
  const SECRET = `secret-${randomUUID()}`;

  it('tRPC: the client that ran the handler gets its whole outcome; retries get a 500 INTERNAL_SERVER_ERROR saying it was executed (outcome and status) and must not be retried; the handler ran once', async () => {
    const app = createCountingApp({ store: new MemoryStore(), maxStoredBytes: MAX_STORED_BYTES });
    const call = (order: { amount: number; note: string; size: number; fail?: boolean }, key: string) =>
      trpcOrders.create(app.trpcFetch, IN_PROCESS, order, { key, account: 'grace' });

    const key = `big-${randomUUID()}`;
    const first = await call({ amount: 1, note: SECRET, size: 1000 }, key);
    expect(first.status).toBe(200);
    expect(trpcOrders.order(first)?.blob).toHaveLength(1000);
    expect(trpcOrders.order(first)?.note).toBe(SECRET);
    const replays = [
      await call({ amount: 1, note: SECRET, size: 1000 }, key),
      await call({ amount: 1, note: SECRET, size: 1000 }, key),
    ];
    for (const replay of replays) {
      expect(replay.status).toBe(500);
      expect(replay.replayed).toBe(true);
      expect(replay.body.error.data.code).toBe('INTERNAL_SERVER_ERROR');
      expect(replay.body.error.message).toMatch(/this request was executed \(outcome: success, status 200\)/);
      expect(replay.body.error.message).toMatch(/Do not retry it/);
      expect(replay.text).not.toContain(SECRET);
    }
    expect(replays[1]!.bytes.equals(replays[0]!.bytes)).toBe(true);

    const errorKey = `big-error-${randomUUID()}`;
    const failed = await call({ amount: 1, note: SECRET, size: 1000, fail: true }, errorKey);
    expect(failed.status).toBe(412);
    expect(failed.body.error.message).toBe(`${SECRET}${'x'.repeat(1000)}`);
    const failedReplay = await call({ amount: 1, note: SECRET, size: 1000, fail: true }, errorKey);
    expect(failedReplay.status).toBe(500);
    expect(failedReplay.body.error.message).toMatch(/this request was executed \(outcome: error, status 412\)/);
    expect(failedReplay.text).not.toContain(SECRET);

    expect(app.executions).toBe(2);
    const completed = app.events.filter((event) => event.type === 'completed');
    expect(completed.map((event) => event.type === 'completed' && [event.status, event.outcomeKind])).toEqual([
      [500, 'error'],
      [500, 'error'],
    ]);
  });

  it('GraphQL: the client that ran the handler gets its whole result, and a retry does not execute again nor receive the oversized result', async () => {
    const app = createCountingApp({ store: new MemoryStore(), maxStoredBytes: MAX_STORED_BYTES });
    const key = `big-${randomUUID()}`;
    const call = () =>
      graphqlOrders.create(
        app.yogaFetch,
        IN_PROCESS,
        { amount: 1, note: SECRET, size: 1000 },
        { key, account: 'heidi' },
      );
    const first = await call();
    expect(first.status).toBe(200);
    expect(graphqlOrders.order(first)?.blob).toHaveLength(1000);
    const replay = await call();
    expect(replay.replayed).toBe(true);
    expect(replay.text).not.toContain(SECRET);
    expect(graphqlOrders.order(replay)).toBeUndefined();
    expect(app.executions).toBe(1);
  });

  it('GraphQL: a retry of an oversized outcome gets a 500 whose message says the request was executed (outcome and status) and must not be retried', async () => {
    const app = createCountingApp({ store: new MemoryStore(), maxStoredBytes: MAX_STORED_BYTES });
    const key = `big-${randomUUID()}`;
    const call = () =>
      graphqlOrders.create(
        app.yogaFetch,
        IN_PROCESS,
        { amount: 1, note: SECRET, size: 1000 },
        { key, account: 'judy' },
      );
    expect((await call()).status).toBe(200);
    const replay = await call();
    expect(replay.status).toBe(500);
    expect(replay.replayed).toBe(true);
    expect(replay.body.errors).toHaveLength(1);
    expect(replay.body.errors[0].message).toMatch(
      /this request was executed \(outcome: success, status 200\).*Do not retry it/,
    );
    expect(replay.body.errors[0].extensions).toMatchObject({
      code: 'IDEMPOTENCY_OUTCOME_NOT_STORED',
      idempotency: { executed: true, reason: 'too_large', status: 200 },
    });
    expect(replay.text).not.toContain(SECRET);
    expect(app.executions).toBe(1);
  });
});
