/**
 * The key-status lookup of the payments example, black-box over real HTTP on SQLite and
 * PostgreSQL: `GET /idempotency/keys/{key}?operation=…` with the caller's usual Authorization,
 * and the same answer from the tRPC procedure `idempotency.status` and the GraphQL field
 * `idempotencyKeyStatus` (R2, R3, A1, S1, K1–K3).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTRPCClient, httpLink, TRPCClientError } from '@trpc/client';
import { createDrizzleStore, sweepAll, type DrizzleDatabase } from '@idem/drizzle';
import type { KeyStatusDocument } from '@idem/core/key-status';
import { openPostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import { pollUntil, untilEvent, untilExpired } from '../../../test/support/waiting.ts';
import type { PaymentsRouter } from '../src/trpc.ts';
import { get, graphql, ledger, migrateExample, mutate, newKey, startExample, type RunningExample } from './http.ts';

const ALICE = { authorization: 'Bearer alice' };
const BOB = { authorization: 'Bearer bob' };
const PAYMENT = { amount: 4200, currency: 'EUR' };

const databases: Array<{ name: string; open(): Promise<{ db: DrizzleDatabase; close(): Promise<void> }> }> = [
  { name: 'SQLite', open: () => openSqliteTarget() },
  { name: 'PostgreSQL', open: () => openPostgresTarget({ schemaPrefix: 'idem_example_status' }) },
];

const statusPath = (key: string, operation = 'payments.create') =>
  `/idempotency/keys/${encodeURIComponent(key)}?operation=${encodeURIComponent(operation)}`;

for (const database of databases) {
  describe(`the key-status lookup of the payments example on ${database.name}`, () => {
    let opened: { db: DrizzleDatabase; close(): Promise<void> };
    /** Retention 30 minutes: outcomes stay replayable through the test. */
    let main: RunningExample;
    /** Retention 1 second, over the same database: keys to expire, archive and reuse. */
    let brief: RunningExample;
    /** A channel that takes 3 seconds: keys in progress. */
    let slow: RunningExample;

    beforeAll(async () => {
      opened = await database.open();
      await migrateExample(opened.db);
      main = await startExample(opened.db, { IDEM_TTL: '30m', IDEM_LEASE: '45s' });
      brief = await startExample(opened.db, { IDEM_TTL: '1s', IDEM_LEASE: '1s' });
      slow = await startExample(opened.db, { IDEM_TTL: '30m', IDEM_LEASE: '45s', CHANNEL_DELAY_MS: '3000' });
    });
    afterAll(async () => {
      await Promise.all([main?.close(), brief?.close(), slow?.close()]);
      await opened?.close();
    });

    const store = () => createDrizzleStore(opened.db);
    const pay = async (server: RunningExample, key: string, headers = ALICE) => {
      const answer = await mutate(server.url, 'payments.create', PAYMENT, { 'idempotency-key': key, ...headers });
      expect(answer.status).toBe(200);
      return answer.body.result.data as { id: string; amount: number; currency: string; createdAt: string };
    };
    const status = async (key: string, headers: Record<string, string> = ALICE, operation = 'payments.create') =>
      get(main.url, statusPath(key, operation), headers);

    it('A1: a completed key inside its retention: 200, one generation, completed with 200, and the stored payment', async () => {
      const key = newKey();
      const payment = await pay(main, key);
      const answer = await status(key);
      expect(answer.status).toBe(200);
      expect(answer.headers.get('content-type')).toBe('application/json');
      expect(answer.headers.get('cache-control')).toBe('no-store');
      expect(answer.body).toEqual({
        key,
        operation: 'payments.create',
        generations: [
          {
            generation: 1,
            operation: 'payments.create',
            state: 'completed',
            firstSeenAt: expect.any(String),
            completedAt: expect.any(String),
            expiresAt: expect.any(String),
            archivedAt: null,
            reusedAt: null,
            status: 200,
            outcomeKind: 'success',
            waits: 0,
            // E8: the generation's mode, fixed at its claim; v1 runs the payment without claim.step.
            onFailure: 'replay',
            attempts: 1,
            steps: [],
            replayable: true,
            outcome: { kind: 'success', value: payment },
          },
        ],
      });
      const [generation] = (answer.body as KeyStatusDocument).generations;
      // Retention counts from completion (R1): the record's own 30 minutes.
      expect(Date.parse(generation!.expiresAt) - Date.parse(generation!.completedAt!)).toBe(30 * 60_000);
      expect((await ledger(main.url)).filter((entry) => entry.id === payment.id)).toHaveLength(1);
    });

    it('R3: the same key after the sweeper archived it: archived, its timestamps and 200 kept, no body', async () => {
      const key = newKey();
      const payment = await pay(brief, key);
      await untilExpired(store(), 'alice/payments.create', key);
      expect((await sweepAll(store())).archived).toBeGreaterThanOrEqual(1);
      const answer = await status(key);
      expect(answer.status).toBe(200);
      expect(answer.body.generations).toEqual([
        expect.objectContaining({
          generation: 1,
          state: 'archived',
          status: 200,
          outcomeKind: 'success',
          completedAt: expect.any(String),
          archivedAt: expect.any(String),
          reusedAt: null,
          replayable: false,
        }),
      ]);
      expect(answer.body.generations[0]).not.toHaveProperty('outcome');
      expect(answer.text).not.toContain(payment.id);
    });

    it('R1: past its retention, before any sweep: expired, its status kept, its body never returned', async () => {
      const key = newKey();
      const payment = await pay(brief, key);
      await untilExpired(store(), 'alice/payments.create', key);
      const answer = await status(key);
      expect(answer.body.generations).toEqual([
        expect.objectContaining({ generation: 1, status: 200, replayable: false }),
      ]);
      // Expired by the store's clock; archived if the previous test's sweep ran after it expired.
      expect(['expired', 'archived']).toContain(answer.body.generations[0].state);
      expect(answer.text).not.toContain(payment.id);
    });

    it('R2: a key reused after its retention: two generations, the first archived with its reuse, the second replayable', async () => {
      const key = newKey();
      const first = await pay(brief, key);
      await untilExpired(store(), 'alice/payments.create', key);
      const second = await pay(main, key);
      expect(second.id).not.toBe(first.id);
      const answer = await status(key);
      expect(
        answer.body.generations.map((generation: { generation: number; state: string }) => generation.state),
      ).toEqual(['archived', 'completed']);
      expect(answer.body.generations[0]).toMatchObject({ generation: 1, status: 200, reusedAt: expect.any(String) });
      expect(answer.body.generations[1]).toMatchObject({
        generation: 2,
        replayable: true,
        outcome: { kind: 'success', value: second },
      });
      expect(answer.text).not.toContain(first.id);
    });

    it('E3: a key in progress: processing, no completion, no outcome', async () => {
      const key = newKey();
      const charging = pay(slow, key);
      await untilEvent(slow.events, (event) => event.type === 'claimed' && event.key === key);
      const answer = await status(key);
      expect(answer.status).toBe(200);
      expect(answer.body.generations).toEqual([
        expect.objectContaining({ state: 'processing', completedAt: null, status: null, replayable: false }),
      ]);
      await charging;
      await pollUntil(async () => ((await status(key)).body.generations[0].state === 'completed' ? true : undefined));
    });

    it("S1: another account's key and a key nobody used get the same 404, byte for byte", async () => {
      const key = newKey();
      await pay(main, key);
      const foreign = await status(key, BOB);
      const unknown = await status(newKey(), BOB);
      expect(foreign.status).toBe(404);
      expect(unknown.status).toBe(404);
      expect(foreign.text).toBe(unknown.text);
      expect([...foreign.headers].filter(([name]) => name !== 'date')).toEqual(
        [...unknown.headers].filter(([name]) => name !== 'date'),
      );
      expect(foreign.body).toMatchObject({ status: 404, title: 'Not Found' });
      // The anonymous account is shared by every anonymous caller: its lookups are refused (403), never alice's record.
      expect((await status(key, {})).status).toBe(403);
      // The same key on another operation is another record (S1).
      expect((await status(key, ALICE, 'payments.refund')).status).toBe(404);
    });

    it.each([
      ['too long', 'k'.repeat(256), 'idempotency_key_invalid'],
      ['a space inside', 'order 1', 'idempotency_key_invalid'],
      ['a double quote inside', 'order"1', 'idempotency_key_invalid'],
      ['a backslash inside', 'order\\1', 'idempotency_key_invalid'],
      ['outside ASCII', 'ordér-1', 'idempotency_key_invalid'],
      ['empty', '', 'idempotency_key_missing'],
    ])('K1–K3: a malformed key (%s) is refused with 400 and a problem that links the policy', async (_, key, code) => {
      const answer = await status(key);
      expect(answer.status).toBe(400);
      expect(answer.headers.get('content-type')).toBe('application/problem+json');
      expect(answer.body).toMatchObject({ status: 400, code });
      expect(answer.body.type).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:\\d+/idempotency#${code}$`));
    });

    it('K3: a key segment that is not percent-encoding, and a missing operation, are refused with 400', async () => {
      expect((await get(main.url, '/idempotency/keys/%ZZ?operation=payments.create', ALICE)).status).toBe(400);
      const noOperation = await get(main.url, `/idempotency/keys/${newKey()}`, ALICE);
      expect(noOperation.status).toBe(400);
      expect(noOperation.body.detail).toMatch(/operation/);
    });

    it('answers 401 to credentials that are not Bearer <account>, and 405 to anything but GET', async () => {
      const key = newKey();
      await pay(main, key);
      const basic = await status(key, { authorization: 'Basic YWxpY2U6eA==' });
      expect(basic.status).toBe(401);
      expect(basic.headers.get('www-authenticate')).toBe('Bearer realm="payments"');
      const post = await fetch(`${main.url}${statusPath(key)}`, { method: 'POST', headers: ALICE });
      expect(post.status).toBe(405);
      expect(post.headers.get('allow')).toBe('GET, HEAD');
    });

    it('answers the same document from the tRPC procedure idempotency.status and the plain HTTP route', async () => {
      const key = newKey();
      await pay(main, key);
      const trpc = createTRPCClient<PaymentsRouter>({
        links: [httpLink({ url: `${main.url}/trpc`, headers: () => ALICE })],
      });
      expect(await trpc.idempotency.status.query({ key, operation: 'payments.create' })).toEqual(
        (await status(key)).body,
      );
      const asBob = createTRPCClient<PaymentsRouter>({
        links: [httpLink({ url: `${main.url}/trpc`, headers: () => BOB })],
      });
      expect(await asBob.idempotency.status.query({ key, operation: 'payments.create' })).toBeNull();
      const refused = await trpc.idempotency.status
        .query({ key: 'order 1', operation: 'payments.create' })
        .catch((e) => e);
      expect(refused).toBeInstanceOf(TRPCClientError);
      expect((refused as TRPCClientError<PaymentsRouter>).data?.httpStatus).toBe(400);
    });

    it('GraphQL: a header key on createPayment is found by Mutation.createPayment, from the field idempotencyKeyStatus and the HTTP route alike', async () => {
      const key = newKey();
      const paid = await graphql(
        main.url,
        'mutation Pay($input: PaymentInput!) { createPayment(input: $input) { id amount } }',
        { variables: { input: PAYMENT }, headers: { 'idempotency-key': key, ...ALICE } },
      );
      expect(paid.status).toBe(200);
      const http = await status(key, ALICE, 'Mutation.createPayment');
      expect(http.status).toBe(200);
      expect(http.body.generations).toEqual([
        expect.objectContaining({
          operation: 'mutation:createPayment',
          state: 'completed',
          status: 200,
          outcome: { kind: 'success', value: { data: paid.body.data } },
        }),
      ]);
      const STATUS = `query Status($key: String!, $operation: String!) {
        idempotencyKeyStatus(key: $key, operation: $operation) {
          key operation generations { generation operation state status replayable outcome }
        }
      }`;
      const field = await graphql(main.url, STATUS, {
        variables: { key, operation: 'Mutation.createPayment' },
        headers: ALICE,
      });
      expect(field.body.data.idempotencyKeyStatus.generations).toEqual([
        {
          generation: 1,
          operation: 'mutation:createPayment',
          state: 'completed',
          status: 200,
          replayable: true,
          outcome: JSON.stringify({ kind: 'success', value: { data: paid.body.data } }),
        },
      ]);
      const foreign = await graphql(main.url, STATUS, {
        variables: { key, operation: 'Mutation.createPayment' },
        headers: BOB,
      });
      expect(foreign.body).toEqual({ data: { idempotencyKeyStatus: null } });
      const malformed = await graphql(main.url, STATUS, {
        variables: { key: 'order 1', operation: 'Mutation.createPayment' },
        headers: ALICE,
      });
      expect(malformed.status).toBe(400);
      expect(malformed.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_INVALID');
    });
  });
}
