/**
 * GraphQL keys as graphql-js reads them, against the payments example over real HTTP on SQLite
 * and PostgreSQL (docs/spec.md K4, E4 and "idem's choices"): a key that does not coerce runs
 * nothing; a header key over several root fields is one unit; one key never answers for two
 * root fields; a selection graphql-js fails after the resolver ran is stored like any outcome;
 * the client adds no header key beside a key of the operation's own.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotentFetch } from '@idem/envelop/client';
import type { DrizzleDatabase } from '@idem/drizzle';
import { openPostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import {
  graphql,
  ledger,
  migrateExample,
  newKey,
  startExample,
  type LedgerEntry,
  type RunningExample,
} from './http.ts';

const databases: Array<{ name: string; open(): Promise<{ db: DrizzleDatabase; close(): Promise<void> }> }> = [
  { name: 'SQLite', open: () => openSqliteTarget() },
  { name: 'PostgreSQL', open: () => openPostgresTarget({ schemaPrefix: 'idem_graphql_keys' }) },
];

const bearer = (account: string) => ({ authorization: `Bearer ${account}` });
const PAY = (amount: number) => `{ amount: ${amount}, currency: "EUR" }`;

/** Both GraphQL hosts of the example: Yoga at /graphql, Apollo Server (@idem/apollo-server) at /apollo/graphql. */
const hosts = databases.flatMap((database) => [
  { ...database, host: 'GraphQL Yoga', prefix: '' },
  { ...database, host: 'Apollo Server', prefix: '/apollo' },
]);

describe.each(hosts)(
  'GraphQL keys read by graphql-js, in the payments example on $name through $host',
  ({ open, prefix }) => {
    let database: { db: DrizzleDatabase; close(): Promise<void> };
    let server: RunningExample;
    let url: string;
    /** `graphql(endpoint, …)` posts to the host's `/graphql`. */
    let endpoint: string;

    async function charged(before: LedgerEntry[]): Promise<number[]> {
      return (await ledger(url)).slice(before.length).map((entry) => entry.amount);
    }
    const eventsFor = (key: string) => server.events.filter((event) => 'key' in event && event.key === key);

    beforeAll(async () => {
      database = await open();
      await migrateExample(database.db);
      server = await startExample(database.db, { IDEM_TTL: '30m', IDEM_LEASE: '45s' });
      url = server.url;
      endpoint = `${url}${prefix}`;
    });
    afterAll(async () => {
      await server?.close();
      await database?.close();
    });

    describe('K4/E4: a key that does not coerce', () => {
      it('a directive key from a defaulted variable sent as null: a request error (400), nothing charged, no claim, every time', async () => {
        const before = await ledger(url);
        const key = newKey();
        const query = `mutation ($k: String = "x") { createPayment(input: ${PAY(100)}) @idempotent(key: $k) { id } }`;
        const sends = [];
        for (let send = 0; send < 2; send++)
          sends.push(
            await graphql(endpoint, query, {
              variables: { k: null },
              headers: { 'idempotency-key': key, ...bearer('acct_k1') },
            }),
          );

        for (const answer of sends) {
          expect(answer.status, answer.text).toBe(400);
          expect(answer.body.data).toBeUndefined();
          expect(answer.body.errors).toEqual([
            expect.objectContaining({ message: 'Argument "key" of non-null type "String!" must not be null.' }),
          ]);
        }
        expect(await charged(before)).toEqual([]);
        expect(eventsFor(key)).toEqual([]);
      });

      it('two argument keys, one field input sent as null: a request error, nothing charged; fixed, each key charges once and then replays', async () => {
        const before = await ledger(url);
        const [k1, k2] = [newKey(), newKey()];
        const query = `mutation ($one: PaymentInput!, $two: PaymentInput = ${PAY(1)}) {
        one: createPayment(input: $one, idempotencyKey: "${k1}") { id }
        two: createPayment(input: $two, idempotencyKey: "${k2}") { id }
      }`;
        const headers = bearer('acct_k3');
        const broken = await graphql(endpoint, query, {
          variables: { one: { amount: 300, currency: 'EUR' }, two: null },
          headers,
        });
        const variables = { one: { amount: 300, currency: 'EUR' }, two: { amount: 301, currency: 'EUR' } };
        const fixed = await graphql(endpoint, query, { variables, headers });
        const again = await graphql(endpoint, query, { variables, headers });

        expect(broken.status, broken.text).toBe(400);
        expect(broken.body.data).toBeUndefined();
        expect(fixed.status, fixed.text).toBe(200);
        expect(again.headers.get('idempotent-replayed')).toBe('true');
        expect(again.body.data).toEqual(fixed.body.data);
        expect(await charged(before)).toEqual([300, 301]);
      });
    });

    it('E4: a header key over a field that runs and one whose input does not coerce: one unit, charged once, replayed on every retry', async () => {
      const before = await ledger(url);
      const key = newKey();
      const query = `mutation ($bad: PaymentInput = ${PAY(9)}) {
      b: createPayment(input: ${PAY(200)}) { id }
      a: createPayment(input: $bad) { id }
    }`;
      const sends = [];
      for (let send = 0; send < 3; send++)
        sends.push(
          await graphql(endpoint, query, {
            variables: { bad: null },
            headers: { 'idempotency-key': key, ...bearer('acct_k2') },
          }),
        );

      expect(sends[0]!.status, sends[0]!.text).toBe(200);
      expect(sends[0]!.body.data).toBeNull();
      expect(sends[0]!.body.errors).toEqual([expect.objectContaining({ path: ['a'] })]);
      for (const retry of sends.slice(1)) {
        expect(retry.headers.get('idempotent-replayed')).toBe('true');
        expect(retry.body.errors).toEqual(sends[0]!.body.errors);
      }
      expect(await charged(before)).toEqual([200]);
    });

    describe('E4: one key identifies one unit', () => {
      const query = (amounts: [number, number, number], key: string) => `mutation {
      a: createPayment(input: ${PAY(amounts[0])}) { id }
      b: createPayment(input: ${PAY(amounts[1])}) { id }
      c: createPayment(input: ${PAY(amounts[2])}, idempotencyKey: "${key}") { id }
    }`;

      it.each([
        ['the same amounts', [400, 400, 400] as [number, number, number]],
        ['different amounts', [401, 402, 403] as [number, number, number]],
      ])(
        'a header key over unkeyed fields beside a field with its own key, %s: 400 IDEMPOTENCY_KEY_AMBIGUOUS, nothing charged',
        async (_, amounts) => {
          const before = await ledger(url);
          const key = newKey();
          const answer = await graphql(endpoint, query(amounts, key), {
            headers: { 'idempotency-key': key, ...bearer('acct_abc') },
          });

          expect(answer.status, answer.text).toBe(400);
          expect(answer.body.data).toBeUndefined();
          expect(answer.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_AMBIGUOUS');
          expect(await charged(before)).toEqual([]);
          expect(eventsFor(key)).toEqual([]);
        },
      );

      it('with a header key and no field keys, the same three fields are three parts of one unit: three charges, one replay', async () => {
        const before = await ledger(url);
        const key = newKey();
        const unkeyed =
          'mutation { a: createPayment(input: { amount: 404, currency: "EUR" }) { id } b: createPayment(input: { amount: 404, currency: "EUR" }) { id } }';
        const headers = { 'idempotency-key': key, ...bearer('acct_abc') };
        const first = await graphql(endpoint, unkeyed, { headers });
        const retry = await graphql(endpoint, unkeyed, { headers });

        expect(first.body.data.a.id).not.toBe(first.body.data.b.id);
        expect(retry.body.data).toEqual(first.body.data);
        expect(await charged(before)).toEqual([404, 404]);
      });
    });

    it('E4: a later keyed field whose selection graphql-js cannot collect ($v: Boolean = true sent as null) fails as a field, after an earlier field charged: both stored, nothing charged again', async () => {
      const before = await ledger(url);
      const [k1, k2] = [newKey(), newKey()];
      const query = `mutation ($v: Boolean = true) {
      first: createPayment(input: ${PAY(500)}, idempotencyKey: "${k1}") { id }
      second: createPayment(input: ${PAY(501)}, idempotencyKey: "${k2}") { id amount @include(if: $v) }
    }`;
      const headers = bearer('acct_include');
      const answer = await graphql(endpoint, query, { variables: { v: null }, headers });
      const retry = await graphql(endpoint, query, { variables: { v: null }, headers });
      const firstAlone = await graphql(
        url,
        `mutation { first: createPayment(input: ${PAY(500)}, idempotencyKey: "${k1}") { id } }`,
        { headers },
      );

      expect(answer.status, answer.text).toBe(200);
      expect(answer.body.data).toBeNull();
      expect(answer.body.errors).toEqual([expect.objectContaining({ path: ['second'] })]);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body.errors).toEqual(answer.body.errors);
      // The first field's payment is not lost: its own key replays it.
      expect(firstAlone.headers.get('idempotent-replayed')).toBe('true');
      const charges = (await ledger(url)).slice(before.length);
      expect(charges.map((entry) => entry.amount)).toEqual([500, 501]);
      expect(firstAlone.body.data.first.id).toBe(charges[0]!.id);
    });

    describe('K4: the client adds no header key beside a key the operation carries', () => {
      const client = () =>
        createIdempotentFetch({ policyUrl: `${url}/idempotency`, fetch: (input, init) => fetch(input, init) });
      const send = (fetchWithKeys: typeof fetch, query: string, variables: Record<string, unknown> = {}) =>
        fetchWithKeys(`${endpoint}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json', ...bearer('acct_client') },
          body: JSON.stringify({ query, variables }),
        });

      it.each([
        [
          'from a variable default',
          (key: string) =>
            `mutation ($k: String = "${key}") { createPayment(input: ${PAY(600)}, idempotencyKey: $k) { id } }`,
        ],
        [
          'behind a fragment',
          (key: string) =>
            `mutation { ...Pay } fragment Pay on Mutation { createPayment(input: ${PAY(600)}) @idempotent(key: "${key}") { id } }`,
        ],
      ])('a key %s: sent as it is, charged once, and replayed', async (_, operation) => {
        const before = await ledger(url);
        const key = newKey();
        const fetchWithKeys = client();
        const first = await send(fetchWithKeys, operation(key));
        const again = await send(fetchWithKeys, operation(key));

        expect(first.status).toBe(200);
        expect(again.headers.get('idempotent-replayed')).toBe('true');
        expect(await charged(before)).toEqual([600]);
        expect(eventsFor(key).map((event) => event.type)).toEqual(['claimed', 'completed', 'replayed']);
      });
    });
  },
);
