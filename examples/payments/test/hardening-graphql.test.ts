/**
 * Issue 14 (hardening), black-box against the payments example over real HTTP on SQLite and
 * PostgreSQL: several root fields under one header key (items 2, 4), the variables a field key's
 * selection reads (8), deep documents (10), header field lines (12), problem types (14).
 */
import { randomUUID } from 'node:crypto';
import { request as httpRequest, type OutgoingHttpHeaders } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PaymentsStore } from '../src/trpc.ts';
import type { DrizzleDatabase } from '@idem/drizzle';
import { openPostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import {
  graphql,
  ledger,
  migrateExample,
  mutate,
  newKey,
  startExample,
  type LedgerEntry,
  type Reply,
  type RunningExample,
} from './http.ts';

const databases: Array<{ name: string; open(): Promise<{ db: DrizzleDatabase; close(): Promise<void> }> }> = [
  { name: 'SQLite', open: () => openSqliteTarget() },
  { name: 'PostgreSQL', open: () => openPostgresTarget({ schemaPrefix: 'idem_hardening' }) },
];

const bearer = (account: string) => ({ authorization: `Bearer ${account}` });

/** POSTs JSON with headers as given, several lines of one field included (Node sends an array as separate lines). */
function postLines(url: string, json: unknown, headers: OutgoingHttpHeaders): Promise<Reply> {
  const body = Buffer.from(JSON.stringify(json));
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json',
          'content-length': body.length,
          ...headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const responseHeaders = new Headers();
          for (const [name, value] of Object.entries(res.headers))
            if (typeof value === 'string') responseHeaders.set(name, value);
          resolve({ status: res.statusCode ?? 0, headers: responseHeaders, text, body: JSON.parse(text) });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe.each(databases)('hardening of the payments example (issue 14) on $name', ({ open }) => {
  let database: { db: DrizzleDatabase; close(): Promise<void> };
  let server: RunningExample;
  let url: string;

  async function newEntries(before: LedgerEntry[]): Promise<LedgerEntry[]> {
    const now = await ledger(url);
    expect(now.slice(0, before.length)).toEqual(before);
    return now.slice(before.length);
  }

  beforeAll(async () => {
    database = await open();
    await migrateExample(database.db);
    server = await startExample(database.db, { IDEM_TTL: '30m', IDEM_LEASE: '45s' });
    url = server.url;
  });
  afterAll(async () => {
    await server?.close();
    await database?.close();
  });

  describe('item 2: a header key over several createPayment fields', () => {
    it('E4: each field is charged for its own amount and answered with its own payment; the retry replays both and charges nothing', async () => {
      const before = await ledger(url);
      const key = newKey();
      const query =
        'mutation { a: createPayment(input: { amount: 100, currency: "EUR" }) { id amount } b: createPayment(input: { amount: 200, currency: "EUR" }) { id amount } }';
      const first = await graphql(url, query, { headers: { 'idempotency-key': key, ...bearer('acct_parts') } });
      const retry = await graphql(url, query, { headers: { 'idempotency-key': key, ...bearer('acct_parts') } });

      expect(first.status, first.text).toBe(200);
      const { a, b } = first.body.data;
      expect([a.amount, b.amount]).toEqual([100, 200]);
      expect(a.id).not.toBe(b.id);
      expect(await newEntries(before)).toEqual([
        { id: a.id, amount: 100, currency: 'EUR' },
        { id: b.id, amount: 200, currency: 'EUR' },
      ]);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body.data).toEqual(first.body.data);
      expect(await newEntries(before)).toHaveLength(2);
    });
  });

  describe('item 4: a later field refused before it started, after an earlier one charged', () => {
    it('E4: the unit is stored once the first field charged: the retry replays the answer, and the claim is never released', async () => {
      const before = await ledger(url);
      const key = newKey();
      const query =
        'mutation { a: createPayment(input: { amount: 100, currency: "EUR" }) { id amount } b: createPayment(input: { amount: -5, currency: "EUR" }) { id amount } }';
      const first = await graphql(url, query, { headers: { 'idempotency-key': key, ...bearer('acct_refused_part') } });
      const retry = await graphql(url, query, { headers: { 'idempotency-key': key, ...bearer('acct_refused_part') } });

      expect(first.status, first.text).toBe(200);
      expect(first.body.data).toBeNull();
      expect(first.body.errors).toEqual([
        expect.objectContaining({ path: ['b'], extensions: expect.objectContaining({ code: 'BAD_USER_INPUT' }) }),
      ]);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body).toEqual({ ...first.body, extensions: { idempotency: { replayed: true } } });
      expect((await newEntries(before)).map((entry) => entry.amount)).toEqual([100]);
      const forKey = server.events.filter((event) => 'key' in event && event.key === key).map((event) => event.type);
      expect(forKey).toEqual(['claimed', 'completed', 'replayed']);
    });
  });

  describe('item 8: an argument key, and the variables the selection reads', () => {
    it('F1/F3: a retry whose @include/@skip variables select other fields is refused with 422; the same variables replay', async () => {
      const before = await ledger(url);
      const key = newKey();
      const query =
        'mutation ($v: Boolean!, $key: String) { createPayment(input: { amount: 800, currency: "EUR" }, idempotencyKey: $key) { id amount @include(if: $v) currency @skip(if: $v) } }';
      const first = await graphql(url, query, { variables: { v: true, key }, headers: bearer('acct_shape') });
      const other = await graphql(url, query, { variables: { v: false, key }, headers: bearer('acct_shape') });
      const same = await graphql(url, query, { variables: { v: true, key }, headers: bearer('acct_shape') });

      expect(first.body.data.createPayment).toEqual({ id: expect.any(String), amount: 800 });
      expect(other.status, other.text).toBe(422);
      expect(other.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_REUSED');
      expect(same.headers.get('idempotent-replayed')).toBe('true');
      expect(same.body.data).toEqual(first.body.data);
      expect(await newEntries(before)).toHaveLength(1);
    });
  });

  describe('item 10: deep and long GraphQL documents', () => {
    it('a document nested thousands of levels deep is refused with 400 before the parser overflows its stack; nothing is charged', async () => {
      const before = await ledger(url);
      const deepSelection = `{ ${'ledger { '.repeat(3000)}id${' }'.repeat(3000)} }`;
      const deepValue = `mutation { createPayment(input: ${'['.repeat(3000)}1${']'.repeat(3000)}) { id } }`;
      for (const query of [deepSelection, deepValue]) {
        const answer = await graphql(url, query, { headers: { 'idempotency-key': newKey(), ...bearer('acct_deep') } });
        expect(answer.status, answer.text.slice(0, 200)).toBe(400);
        expect(answer.body.errors[0].message).toMatch(/token limit/i);
      }
      expect(await newEntries(before)).toEqual([]);
    });

    it('a selection deeper than the schema needs is refused with 400 by the depth limit, within the token limit', async () => {
      const answer = await graphql(url, `{ ${'ledger { '.repeat(12)}id${' }'.repeat(12)} }`);
      expect(answer.status, answer.text.slice(0, 200)).toBe(400);
      expect(answer.body.errors.map((error: { message: string }) => error.message)).toContainEqual(
        expect.stringMatching(/depth limit/i),
      );
      const introspection = await graphql(
        url,
        '{ __schema { types { name fields { name type { name ofType { name ofType { name ofType { name } } } } } } } }',
      );
      expect(introspection.status).toBe(200);
    });
  });

  describe('item 12: two Idempotency-Key field lines, one of them empty', () => {
    it('K1: tRPC and GraphQL both read the key of the non-empty line, the same key a single line sends', async () => {
      const key = newKey();
      const lines = { 'idempotency-key': [key, ''], ...bearer('acct_lines') };
      const trpc = await postLines(`${url}/trpc/payments.create`, { amount: 700, currency: 'EUR' }, lines);
      const gql = await postLines(
        `${url}/graphql`,
        { query: 'mutation { createPayment(input: { amount: 700, currency: "EUR" }) { id } }' },
        lines,
      );
      const trpcSingle = await postLines(
        `${url}/trpc/payments.create`,
        { amount: 700, currency: 'EUR' },
        { 'idempotency-key': key, ...bearer('acct_lines') },
      );
      const gqlSingle = await postLines(
        `${url}/graphql`,
        { query: 'mutation { createPayment(input: { amount: 700, currency: "EUR" }) { id } }' },
        { 'idempotency-key': key, ...bearer('acct_lines') },
      );

      expect([trpc.status, gql.status], `${trpc.text} ${gql.text}`).toEqual([200, 200]);
      expect(trpcSingle.headers.get('idempotent-replayed')).toBe('true');
      expect(trpcSingle.body.result.data.id).toBe(trpc.body.result.data.id);
      expect(gqlSingle.headers.get('idempotent-replayed')).toBe('true');
      expect(gqlSingle.body.data.createPayment.id).toBe(gql.body.data.createPayment.id);
      const claimed = server.events
        .filter((event) => event.type === 'claimed' && event.scope.startsWith('acct_lines/'))
        .map((event) => 'key' in event && event.key);
      expect(claimed).toEqual([key, key]);
    });
  });

  describe('item 14: problem types', () => {
    /** A store that is down: every claim fails (E5, 503). */
    const downStore = (): PaymentsStore => {
      const store = server.app.store;
      return {
        claim: () => Promise.reject(new Error('store down')),
        complete: (args) => store.complete(args),
        saveStep: (args) => store.saveStep(args),
        renew: (args) => store.renew(args),
        countWait: (args) => store.countWait(args),
        release: (args) => store.release(args),
        get: (scope, key) => store.get(scope, key),
        timeline: (scope, key) => store.timeline(scope, key),
        sweep: (options) => store.sweep(options),
        purge: (options) => store.purge(options),
        ping: () => store.ping(),
      };
    };

    /** A key another request holds, still processing (E3, 409); no fingerprint, so any payload meets the claim. */
    async function inProgress(scope: string): Promise<string> {
      const key = newKey();
      const claim = await server.app.store.claim({
        scope,
        key,
        fingerprint: null,
        token: randomUUID(),
        leaseMs: 60_000,
        retentionMs: 60_000,
        expiredReuse: 'execute',
      });
      expect(claim.outcome).toBe('claimed');
      return key;
    }

    it('K2/X1: tRPC and GraphQL problems carry an absolute type, one per kind: missing key, in progress, reused key, store unavailable', async () => {
      const unavailable = await startExample(
        database.db,
        { IDEM_TTL: '30m', IDEM_LEASE: '45s' },
        { store: downStore() },
      );
      try {
        const account = bearer('acct_types');
        const reusedKey = newKey();
        await mutate(
          url,
          'payments.create',
          { amount: 100, currency: 'EUR' },
          { 'idempotency-key': reusedKey, ...account },
        );
        const trpc = [
          await mutate(url, 'payments.create', { amount: 100, currency: 'EUR' }, account),
          await mutate(
            url,
            'payments.create',
            { amount: 100, currency: 'EUR' },
            { 'idempotency-key': await inProgress('acct_types/payments.create'), ...account },
          ),
          await mutate(
            url,
            'payments.create',
            { amount: 999, currency: 'EUR' },
            { 'idempotency-key': reusedKey, ...account },
          ),
          await mutate(
            unavailable.url,
            'payments.create',
            { amount: 100, currency: 'EUR' },
            { 'idempotency-key': newKey(), ...account },
          ),
        ];
        const gqlKey = newKey();
        const pay = (amount: number) =>
          `mutation { createPayment(input: { amount: ${amount}, currency: "EUR" }) { id } }`;
        await graphql(url, pay(100), { headers: { 'idempotency-key': gqlKey, ...account } });
        const gql = [
          await graphql(url, pay(100), { headers: account }),
          await graphql(url, pay(100), {
            headers: { 'idempotency-key': await inProgress('acct_types/mutation:createPayment'), ...account },
          }),
          await graphql(url, pay(999), { headers: { 'idempotency-key': gqlKey, ...account } }),
          await graphql(unavailable.url, pay(100), { headers: { 'idempotency-key': newKey(), ...account } }),
        ];

        const kinds = [
          'idempotency_key_missing',
          'idempotency_request_in_progress',
          'idempotency_key_reused',
          'idempotency_store_unavailable',
        ];
        expect(trpc.map((reply) => reply.status)).toEqual([400, 409, 422, 503]);
        expect(gql.map((reply) => reply.status)).toEqual([400, 409, 422, 503]);
        expect(trpc.map((reply) => reply.body.error.data.idempotency.type)).toEqual([
          ...kinds.slice(0, 3).map((kind) => `${url}/idempotency#${kind}`),
          `${unavailable.url}/idempotency#idempotency_store_unavailable`,
        ]);
        expect(gql.map((reply) => reply.body.errors[0].extensions.idempotency.type)).toEqual([
          ...kinds.slice(0, 3).map((kind) => `${url}/idempotency#${kind}`),
          `${unavailable.url}/idempotency#idempotency_store_unavailable`,
        ]);
      } finally {
        await unavailable.close();
      }
    });

    it('R4: a problem type leads to the policy, whose JSON lists that type and whose HTML page has its anchor', async () => {
      const refused = await graphql(url, 'mutation { createPayment(input: { amount: 1, currency: "EUR" }) { id } }', {
        headers: bearer('acct_types'),
      });
      const type = new URL(refused.body.errors[0].extensions.idempotency.type);
      const policy = await fetch(type, { headers: { accept: 'application/json' } }).then((response) => response.json());
      const page = await fetch(type, { headers: { accept: 'text/html' } }).then((response) => response.text());

      expect(policy.documentationUrl).toBe(`${url}/idempotency`);
      expect(policy.statuses).toContainEqual(
        expect.objectContaining({ status: 400, code: 'idempotency_key_missing', type: type.href }),
      );
      expect(new Set(policy.statuses.map((status: { type: string }) => status.type)).size).toBe(policy.statuses.length);
      expect(page).toContain(`id="${type.hash.slice(1)}"`);
    });
  });
});
