/**
 * Issue 31, item 2: one masking rule on every way a stored outcome leaves the store (R2, A1, E4).
 *
 * - Generative, over the example's three lookups (REST `GET /idempotency/keys/…`, tRPC
 *   `idempotency.status`, GraphQL `idempotencyKeyStatus`) on SQLite and PostgreSQL: outcomes that
 *   carry a database error's text (SQL, driver message, parameters) as every adapter stores them —
 *   a tRPC 500, a GraphQL error marked unexpected, a GraphQL result whose errors are — are looked
 *   up through every transport, under both operation spellings, and that text never appears.
 * - Atomic mode on PostgreSQL: a handler that turns a failed statement into an answer (as tRPC,
 *   GraphQL and Hono do) leaves the transaction aborted, and `RELEASE SAVEPOINT` fails. That is the
 *   transaction failing (503, E5, nothing stored), never the handler's outcome with the driver's
 *   text in it.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatScope, createEngine, StoreUnavailableError, type IdempotencyStore } from '@idem/core';
import { MASKED_ERROR_MESSAGE } from '@idem/core/key-status';
import type { StoredOutcome } from '@idem/core/store';
import { createDrizzleStore, type DrizzleDatabase } from '@idem/drizzle';
import { openPostgresTarget } from '../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../packages/drizzle/test/sqlite-target.ts';
import { get, graphql, migrateExample, startExample, type RunningExample } from '../../examples/payments/test/http.ts';

const ACCOUNT = 'alice';
const AS_ALICE = { authorization: `Bearer ${ACCOUNT}` };

const databases: Array<{ name: string; open(): Promise<{ db: DrizzleDatabase; close(): Promise<void> }> }> = [
  { name: 'SQLite', open: () => openSqliteTarget() },
  { name: 'PostgreSQL', open: () => openPostgresTarget({ schemaPrefix: 'idem_masking' }) },
];

/** A database error's text as drizzle words it: the statement, then its parameters. */
const leakedText = fc
  .tuple(
    fc.constantFrom(
      'INSERT INTO payments_ledger',
      'UPDATE idem_keys SET',
      'release savepoint sp1',
      'SELECT secret FROM',
    ),
    fc.stringMatching(/^[a-z0-9_]{6,16}$/),
    fc.constantFrom(
      'value "2147483648" is out of range for type integer',
      'terminating connection',
      'deadlock detected',
    ),
  )
  .map(([statement, param, driver]) => `Failed query: ${statement} ($1)\nparams: pay_${param}\n${driver} [${param}]`);

/** The three shapes a stored outcome with an unexpected error takes, by the adapter that stored it. */
type Shape = 'trpc-error' | 'graphql-error' | 'graphql-result';

function storedOutcome(shape: Shape, message: string): StoredOutcome {
  switch (shape) {
    case 'trpc-error':
      return {
        kind: 'error',
        status: 500,
        body: JSON.stringify({ name: 'TRPCError', code: 'INTERNAL_SERVER_ERROR', message, status: 500 }),
      };
    case 'graphql-error':
      return {
        kind: 'error',
        status: 500,
        body: JSON.stringify({
          name: 'GraphQLError',
          code: 'INTERNAL_SERVER_ERROR',
          message,
          status: 500,
          data: { message, unexpected: { name: 'DrizzleQueryError' } },
        }),
      };
    case 'graphql-result':
      return {
        kind: 'success',
        status: 200,
        body: JSON.stringify({
          data: { createPayment: null },
          errors: [{ message, path: ['createPayment'], unexpected: { name: 'DrizzleQueryError' } }],
        }),
      };
  }
}

for (const database of databases) {
  describe(`R2: no key-status lookup shows an unexpected error's text, on ${database.name} (issue 31, item 2)`, () => {
    let opened: { db: DrizzleDatabase; close(): Promise<void> };
    let example: RunningExample;
    let store: IdempotencyStore;

    beforeAll(async () => {
      opened = await database.open();
      await migrateExample(opened.db);
      store = createDrizzleStore(opened.db);
      example = await startExample(opened.db, { IDEM_TTL: '30m', IDEM_LEASE: '45s' });
    });
    afterAll(async () => {
      await example?.close();
      await opened?.close();
    });

    /** Stores `outcome` under (operation, alice, key) as an adapter would. */
    async function store1(operation: string, key: string, outcome: StoredOutcome): Promise<void> {
      const scope = formatScope(operation, ACCOUNT);
      const token = randomUUID();
      const claimed = await store.claim({
        scope,
        key,
        fingerprint: null,
        token,
        leaseMs: 30_000,
        retentionMs: 3_600_000,
        expiredReuse: 'execute',
      });
      expect(claimed.outcome).toBe('claimed');
      expect(await store.complete({ scope, key, token, outcome })).toBe(true);
    }

    /** Every transport's answer to a lookup of (operation, key), as text. */
    async function lookups(operation: string, key: string): Promise<string[]> {
      const rest = await get(
        example.url,
        `/idempotency/keys?key=${encodeURIComponent(key)}&operation=${encodeURIComponent(operation)}`,
        AS_ALICE,
      );
      const trpc = await get(
        example.url,
        `/trpc/idempotency.status?input=${encodeURIComponent(JSON.stringify({ key, operation }))}`,
        AS_ALICE,
      );
      const gql = await graphql(
        example.url,
        'query ($key: String!, $operation: String!) { idempotencyKeyStatus(key: $key, operation: $operation) { generations { outcome } } }',
        { variables: { key, operation }, headers: AS_ALICE },
      );
      for (const answer of [rest, trpc, gql]) expect(answer.status).toBe(200);
      return [rest.text, trpc.text, gql.text];
    }

    it('R2 (generative): tRPC and GraphQL outcomes with SQL and parameters in them are masked on REST, tRPC and GraphQL alike', async () => {
      await fc.assert(
        fc.asyncProperty(
          leakedText,
          fc.constantFrom<Shape>('trpc-error', 'graphql-error', 'graphql-result'),
          async (message, shape) => {
            const key = `mask-${randomUUID()}`;
            // tRPC records live under the procedure path; GraphQL header-key records under `mutation:<field>`.
            const stored = shape === 'trpc-error' ? 'payments.create' : 'mutation:createPayment';
            await store1(stored, key, storedOutcome(shape, message));
            const asked =
              shape === 'trpc-error' ? ['payments.create'] : ['Mutation.createPayment', 'mutation:createPayment'];
            for (const operation of asked) {
              const answers = await lookups(operation, key);
              for (const text of answers) {
                expect(text).not.toContain('Failed query');
                expect(text).not.toContain('params:');
                expect(text).not.toContain(message.split('\n')[2]!);
              }
              // Each transport that has the record shows it, masked (tRPC reads `Mutation.x` field keys only).
              const found = answers.filter(
                (text) => !text.includes('"data":null') && !text.includes('"idempotencyKeyStatus":null'),
              );
              expect(found.length).toBeGreaterThanOrEqual(2);
              for (const text of found) expect(text).toContain(MASKED_ERROR_MESSAGE.replace('.', ''));
            }
          },
        ),
        { numRuns: 12 },
      );
    });
  });
}

describe('E5: in atomic mode a failed RELEASE SAVEPOINT fails the transaction, never a stored outcome (PostgreSQL)', () => {
  let opened: Awaited<ReturnType<typeof openPostgresTarget>>;
  beforeAll(async () => {
    opened = await openPostgresTarget({ schemaPrefix: 'idem_masking_atomic' });
    await migrateExample(opened.db as DrizzleDatabase);
  });
  afterAll(() => opened?.close());

  it('E5: a handler that answers after a failed statement gets 503, nothing is stored, and the retry runs', async () => {
    const store = createDrizzleStore(opened.db as DrizzleDatabase);
    const engine = createEngine({ store });
    const request = { scope: formatScope('payments.create', ACCOUNT), key: `sp-${randomUUID()}`, fingerprint: null };
    let runs = 0;
    // As tRPC, GraphQL and Hono do with a thrown error: the failure becomes an answer, the savepoint is left aborted.
    const attempt = engine.executeAtomic(request, async ({ tx }) => {
      runs++;
      try {
        await (tx as any).execute(sql`SELECT 2147483648::integer`);
      } catch {
        return { answered: 'an error the host turned into a response' };
      }
      return { answered: 'ok' };
    });
    await expect(attempt).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(await store.get(request.scope, request.key)).toBeNull();
    const retry = await engine.executeAtomic(request, async () => {
      runs++;
      return { answered: 'ok' };
    });
    expect(retry).toMatchObject({ replayed: false, value: { answered: 'ok' } });
    expect(runs).toBe(2);
  });
});
