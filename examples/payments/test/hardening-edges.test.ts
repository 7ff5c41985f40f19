/**
 * The third hardening pass at the example's edges, black-box over real HTTP on SQLite and
 * PostgreSQL: bodies without Content-Length (413 or success, never 500), amounts past the
 * ledger's integer and the database's data exceptions (400, never 503 or a stored 500), the
 * shared anonymous account refused by the key-status lookup (403), the keys `.` and `..`
 * reachable through the lookup's query form, and stored outcomes masked on every lookup (R2, A1,
 * E4, E5, K3, S1).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DrizzleDatabase } from '@idem/drizzle';
import { MASKED_ERROR_MESSAGE } from '@idem/core/key-status';
import { openPostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import { MAX_AMOUNT } from '../src/channel.ts';
import { get, graphql, ledger, migrateExample, mutate, newKey, startExample, type RunningExample } from './http.ts';
import { streamOf } from '../../../test/support/streams.ts';

const ALICE = { authorization: 'Bearer alice' };
const PAYMENT = { amount: 4200, currency: 'EUR' };
const MAX_BODY_BYTES = 64 * 1024;

const databases: Array<{
  name: string;
  pg: boolean;
  open(): Promise<{ db: DrizzleDatabase; close(): Promise<void> }>;
}> = [
  { name: 'SQLite', pg: false, open: () => openSqliteTarget() },
  { name: 'PostgreSQL', pg: true, open: () => openPostgresTarget({ schemaPrefix: 'idem_example_edges' }) },
];

async function payChunked(url: string, body: string, key: string) {
  const response = await fetch(`${url}/v1/payments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...ALICE },
    body: streamOf(body),
    duplex: 'half',
  } as RequestInit & { duplex: 'half' });
  return { status: response.status, body: (await response.json()) as any };
}

for (const database of databases) {
  describe(`the example's edges on ${database.name} (issue 31)`, () => {
    let opened: { db: DrizzleDatabase; close(): Promise<void> };
    let example: RunningExample;
    let atomic: RunningExample | undefined;

    beforeAll(async () => {
      opened = await database.open();
      await migrateExample(opened.db);
      example = await startExample(opened.db, { IDEM_TTL: '30m', IDEM_LEASE: '45s' });
      if (database.pg) atomic = await startExample(opened.db, { IDEM_TTL: '30m', IDEM_LEASE: '45s' }, { atomic: true });
    });
    afterAll(async () => {
      await Promise.all([example?.close(), atomic?.close()]);
      await opened?.close();
    });

    it('item 3: POST /v1/payments with a chunked body (no Content-Length) is charged (201) and replayed', async () => {
      const key = newKey();
      const first = await payChunked(example.url, JSON.stringify(PAYMENT), key);
      expect(first.status).toBe(201);
      expect(first.body).toMatchObject(PAYMENT);
      const again = await payChunked(example.url, JSON.stringify(PAYMENT), key);
      expect(again.status).toBe(201);
      expect(again.body.id).toBe(first.body.id);
    });

    it('item 3: a chunked body over the limit is refused with 413 and nothing is charged', async () => {
      const before = (await ledger(example.url)).length;
      const body = JSON.stringify({ ...PAYMENT, note: 'x'.repeat(MAX_BODY_BYTES) });
      const answer = await payChunked(example.url, body, newKey());
      expect(answer.status).toBe(413);
      expect(answer.body.status).toBe(413);
      expect((await ledger(example.url)).length).toBe(before);
    });

    it(`item 5: an amount past ${MAX_AMOUNT} is a 400 on tRPC, REST and GraphQL, nothing charged, the key free`, async () => {
      const before = (await ledger(example.url)).length;
      const amount = MAX_AMOUNT + 1;
      const trpc = await mutate(
        example.url,
        'payments.create',
        { amount, currency: 'EUR' },
        {
          'idempotency-key': newKey(),
          ...ALICE,
        },
      );
      expect(trpc.status).toBe(400);
      const rest = await fetch(`${example.url}/v1/payments`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': newKey(), ...ALICE },
        body: JSON.stringify({ amount, currency: 'EUR' }),
      });
      expect(rest.status).toBe(400);
      const gql = await graphql(
        example.url,
        'mutation ($amount: Int!) { createPayment(input: { amount: $amount, currency: "EUR" }) { id } }',
        { variables: { amount }, headers: { 'idempotency-key': newKey(), ...ALICE } },
      );
      // GraphQL's own Int is 32-bit: the variable is refused before anything runs (a request error, no data).
      expect(gql.body.data).toBeUndefined();
      expect(gql.body.errors[0].message).toMatch(/Int cannot represent/);
      expect((await ledger(example.url)).length).toBe(before);
      // The largest amount the schemas accept is charged.
      const largest = await mutate(
        example.url,
        'payments.create',
        { amount: MAX_AMOUNT, currency: 'EUR' },
        {
          'idempotency-key': newKey(),
          ...ALICE,
        },
      );
      expect(largest.status).toBe(200);
    });

    it('item 6 (S1): the shared anonymous account cannot look a key up: 403 problem+json on REST, tRPC and GraphQL', async () => {
      const key = newKey();
      expect((await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key })).status).toBe(200);
      const rest = await get(example.url, `/idempotency/keys/${key}?operation=payments.create`);
      expect(rest.status).toBe(403);
      expect(rest.headers.get('content-type')).toBe('application/problem+json');
      expect(rest.body.type).toMatch(/\/idempotency#idempotency_lookup_shared_principal$/);
      expect(rest.text).not.toContain('pay_');
      const trpc = await get(
        example.url,
        `/trpc/idempotency.status?input=${encodeURIComponent(JSON.stringify({ key, operation: 'payments.create' }))}`,
      );
      expect(trpc.status).toBe(403);
      expect(trpc.text).not.toContain('pay_');
      const gql = await graphql(
        example.url,
        'query ($key: String!) { idempotencyKeyStatus(key: $key, operation: "payments.create") { key } }',
        {
          variables: { key },
        },
      );
      expect(gql.status).toBe(403);
      expect(gql.text).not.toContain('pay_');
      // The same lookup with credentials still answers for the caller's own keys.
      const own = newKey();
      await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': own, ...ALICE });
      expect((await get(example.url, `/idempotency/keys/${own}?operation=payments.create`, ALICE)).status).toBe(200);
    });

    it('item 7 (K3): the keys `.` and `..` are looked up through the query form GET /idempotency/keys?key=…', async () => {
      for (const key of ['.', '..']) {
        const paid = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': `"${key}"`, ...ALICE });
        expect([200, 409]).toContain(paid.status);
        const answer = await get(
          example.url,
          `/idempotency/keys?key=${encodeURIComponent(key)}&operation=payments.create`,
          ALICE,
        );
        expect(answer.status).toBe(200);
        expect(answer.body.key).toBe(key);
      }
      const missing = await get(example.url, '/idempotency/keys?operation=payments.create', ALICE);
      expect(missing.status).toBe(400);
    });

    it.runIf(database.pg)(
      "item 5 (E4, E5): a PostgreSQL data exception (SQLSTATE 22003) from the ledger is ChargeRefusedError (the resolvers' 400), not a ChargeNotRecordedError (503), and nothing is charged",
      async () => {
        // The schemas stop such amounts; the channel's own guard is what an atomic handler meets when one slips through.
        const { PaymentChannel } = await import('../src/channel.ts');
        const channel = new PaymentChannel(opened.db);
        await expect(
          channel.charge({ account: 'alice', amount: MAX_AMOUNT + 1, currency: 'EUR' }),
        ).rejects.toMatchObject({
          name: 'ChargeRefusedError',
        });
      },
    );

    it.runIf(database.pg)(
      'item 2 (R2): no lookup of a key whose outcome is an unexpected error shows its text — REST, tRPC and GraphQL',
      async () => {
        // Amount 13: the channel fails after charging (a 500 stored, E4); its text never leaves through a lookup.
        const key = newKey();
        const failed = await mutate(
          atomic!.url,
          'payments.create',
          { amount: 13, currency: 'EUR' },
          {
            'idempotency-key': key,
            ...ALICE,
          },
        );
        expect(failed.status).toBe(500);
        const query = (operation: string) => `/idempotency/keys/${key}?operation=${encodeURIComponent(operation)}`;
        const rest = await get(atomic!.url, query('payments.create'), ALICE);
        const trpc = await get(
          atomic!.url,
          `/trpc/idempotency.status?input=${encodeURIComponent(JSON.stringify({ key, operation: 'payments.create' }))}`,
          ALICE,
        );
        const gql = await graphql(
          atomic!.url,
          'query ($key: String!) { idempotencyKeyStatus(key: $key, operation: "payments.create") { generations { outcome } } }',
          { variables: { key }, headers: ALICE },
        );
        expect(rest.status).toBe(200);
        expect(rest.body.generations[0].outcome.error.message).toBe(MASKED_ERROR_MESSAGE);
        for (const answer of [rest, trpc, gql]) {
          expect(answer.status).toBe(200);
          expect(answer.text).toContain(MASKED_ERROR_MESSAGE.replace('.', ''));
          expect(answer.text).not.toMatch(/payment channel failed|INSERT|params/);
        }
      },
    );
  });
}
