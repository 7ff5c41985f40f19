/**
 * Scenario 6, durability (E2, E4): outcomes stored by one process replay byte for byte from
 * another process after a SIGKILL (no graceful shutdown): the payments example's successes and
 * its amount-13 failures (a 500 stored after the channel charged), through tRPC and GraphQL;
 * and a unicode-heavy output through an app restarted in process on the same database.
 * Bodies are compared as raw bytes, never as parsed JSON.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDrizzleStore } from '@idem/drizzle';
import { openDatabase } from '@idem/drizzle/connect';
import { ExampleFleet } from './support/example-server.ts';
import { SHARED_DATABASES, STORE_OPTIONS, type SharedDatabase } from './support/databases.ts';
import { graphqlPayments, ledger, trpcPayments, type PaymentEndpoint, type PaymentInput } from './support/payments.ts';
import { createCountingApp, IN_PROCESS, ORDER_ENDPOINTS } from './support/counting-app.ts';
import type { Answer } from './support/http.ts';

/** Scripts, combining marks, bidi controls, emoji sequences, escapes JSON must write, a lone surrogate. */
const UNICODE_NOTE = [
  'Zahlung – 支付 – 決済 – платёж – تحويل – תשלום – ਭੁਗਤਾਨ',
  'e\u0301 n\u0303 \u1E9B\u0323 ﬁ Å Å',
  '\u202Eevil\u202C \u200B\u200D\uFEFF',
  '💳🧾 👩‍👩‍👧‍👦 🏳️‍🌈 🇪🇺 𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
  '"quoted" \\back\\slash\\ \t tab \n newline \u0000 nul \u001F \u007F \u2028 \u2029',
  'lone \uD800 surrogate',
]
  .join(' | ')
  .repeat(20);

interface Recorded {
  title: string;
  first: Answer;
  replay: Answer;
}

/** The extension a GraphQL replay adds after the stored result (docs/graphql-yoga.md). */
function expectGraphQLReplayOf(first: Answer, replay: Answer, extension: Record<string, unknown>) {
  expect(first.text.endsWith('}')).toBe(true);
  expect(replay.text).toBe(`${first.text.slice(0, -1)},"extensions":{"idempotency":${JSON.stringify(extension)}}}`);
}

describe.each(SHARED_DATABASES)('durability on $label', ({ label, available, open }) => {
  const fleet = new ExampleFleet();
  let database: SharedDatabase;

  beforeAll(async () => {
    if (available) database = await open();
  });

  afterAll(async () => {
    await fleet.killAll();
    await database?.close();
  });

  it.skipIf(!available)(
    'E2/E4: outcomes stored before a SIGKILL replay byte-identical from the restarted server, with Idempotent-Replayed: true (tRPC 200 and 500, GraphQL operation and field units)',
    async () => {
      const cases: Array<{
        title: string;
        endpoint: PaymentEndpoint;
        keyIn: 'header' | 'input';
        input: PaymentInput;
        extension?: Record<string, unknown>;
      }> = [
        {
          title: 'tRPC 200, header key',
          endpoint: trpcPayments,
          keyIn: 'header',
          input: { amount: 4200, currency: 'EUR' },
        },
        {
          title: 'tRPC 500 (amount 13), input-field key',
          endpoint: trpcPayments,
          keyIn: 'input',
          input: { amount: 13, currency: 'JPY' },
        },
        {
          title: 'GraphQL, header key (operation unit)',
          endpoint: graphqlPayments,
          keyIn: 'header',
          input: { amount: 990, currency: 'CHF' },
          extension: { replayed: true },
        },
        {
          title: 'GraphQL error (amount 13), argument key (field unit)',
          endpoint: graphqlPayments,
          keyIn: 'input',
          input: { amount: 13, currency: 'USD' },
          extension: { replayed: true, replayedFields: ['createPayment'] },
        },
      ];
      const keys = cases.map(() => `durable-${randomUUID()}`);
      const account = 'acct_durable';

      const before = await fleet.start({ databaseUrl: database.url, name: 'payments (before the kill)' });
      const recorded: Recorded[] = [];
      for (const [i, { title, endpoint, keyIn, input }] of cases.entries()) {
        const first = await endpoint.create(before.url, input, { key: keys[i]!, keyIn, account });
        const replay = await endpoint.create(before.url, input, { key: keys[i]!, keyIn, account });
        recorded.push({ title, first, replay });
      }
      const charged = await ledger(before.url);
      await before.kill('SIGKILL');

      const after = await fleet.start({ databaseUrl: database.url, name: 'payments (restarted)' });
      const summary = [];
      for (const [i, { title, endpoint, keyIn, input, extension }] of cases.entries()) {
        const { first, replay } = recorded[i]!;
        const again = await endpoint.create(after.url, input, { key: keys[i]!, keyIn, account });
        summary.push({ title, status: first.status, bytes: first.bytes.length, replayBytes: again.bytes.length });

        expect(first.replayed, title).toBe(false);
        expect([replay.replayed, again.replayed], title).toEqual([true, true]);
        expect(again.status, title).toBe(first.status);
        expect(again.headers.get('content-type'), title).toBe(first.headers.get('content-type'));
        expect(
          again.bytes.equals(replay.bytes),
          `${title}: the replay after the restart is byte-identical to the one before`,
        ).toBe(true);
        if (extension) expectGraphQLReplayOf(first, again, extension);
        else
          expect(again.bytes.equals(first.bytes), `${title}: the replay is byte-identical to the first answer`).toBe(
            true,
          );
      }
      console.info(`[reliability] durability ${label} ${JSON.stringify(summary)}`);

      expect(recorded.map(({ first }) => first.status)).toEqual([200, 500, 200, 200]);
      expect(recorded[3]!.first.body.errors[0].message).toBe(
        'payment channel failed unexpectedly after charging 13 USD',
      );
      // Nothing ran again after the restart: the ledger is what the first process charged.
      expect(await ledger(after.url)).toEqual(charged);
      expect(charged).toHaveLength(4);
      await after.settled();
      expect(after.events.filter((event) => event.type === 'replayed')).toHaveLength(4);
      expect(after.events.filter((event) => event.type === 'claimed')).toHaveLength(0);
    },
    60_000,
  );

  it.skipIf(!available).each(ORDER_ENDPOINTS)(
    'E2: a unicode-heavy output ($name) replays byte-identical from an app restarted on a new connection',
    async (endpoint) => {
      const key = `unicode-${randomUUID()}`;
      const input = { amount: 1, note: UNICODE_NOTE };
      const call = (handler: Parameters<typeof endpoint.create>[0]) =>
        endpoint.create(handler, IN_PROCESS, input, { key, account: 'acct_unicode' });

      const firstConnection = await openDatabase(database.url);
      const firstApp = createCountingApp({ store: createDrizzleStore(firstConnection.db, STORE_OPTIONS) });
      const first = await call(endpoint.handler(firstApp));
      const replay = await call(endpoint.handler(firstApp));
      await firstConnection.close();

      const secondConnection = await openDatabase(database.url);
      try {
        const secondApp = createCountingApp({ store: createDrizzleStore(secondConnection.db, STORE_OPTIONS) });
        const again = await call(endpoint.handler(secondApp));
        expect(first.status).toBe(200);
        expect(endpoint.order(first)?.note).toBe(UNICODE_NOTE);
        expect(again.replayed).toBe(true);
        expect(secondApp.executions).toBe(0);
        expect(again.bytes.equals(replay.bytes)).toBe(true);
        if (endpoint.name === 'tRPC') expect(again.bytes.equals(first.bytes)).toBe(true);
        else expectGraphQLReplayOf(first, again, { replayed: true });
      } finally {
        await secondConnection.close();
      }
    },
  );
});
