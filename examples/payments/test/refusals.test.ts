/**
 * What the example answers at its edges, over real HTTP on both transports: form-encoded
 * mutations (CSRF), scopes too long for the store's key, an empty quoted header beside a field
 * key, a bare key with a comma, a 401 a page on an allowed origin must be able to read, the
 * statuses the README promises for GraphQL refusals and large bodies, unexpected errors (masked,
 * their cause in the server's log), and the events an operator searches for failed outcomes.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { IdempotencyEvent } from '@idem/core';
import { MAX_SCOPE_BYTES } from '@idem/core';
import { openPostgresTarget, type PostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget, type SqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import { UNEXPECTED_ERROR_MESSAGE } from '../src/trpc.ts';
import { get, graphql, ledger, migrateExample, mutate, newKey, startExample, type RunningExample } from './http.ts';

const PAYMENT = { amount: 4200, currency: 'EUR' };
const SHOP = 'http://shop.localhost:3001';
const CHECKOUT = 'http://127.0.0.1:3001';
const README = readFileSync(fileURLToPath(new URL('../README.md', import.meta.url)), 'utf8');
const PAY_BY_ARGUMENT = (key: string) =>
  `mutation { createPayment(input: {amount: 4200, currency: "EUR"}, idempotencyKey: "${key}") { id } }`;

let target: SqliteTarget;
let example: RunningExample;
beforeAll(async () => {
  target = await openSqliteTarget();
  await migrateExample(target.db);
  example = await startExample(target.db, { CORS_ORIGIN: `${SHOP},${CHECKOUT}` });
});
afterAll(async () => {
  await example?.close();
  await target?.close();
});

const eventsOf = (key: string) => example.events.filter((event) => 'key' in event && event.key === key);

describe('CSRF: mutations a web page can send without asking', () => {
  const formBodies = (key: string) => {
    const multipart = new FormData();
    multipart.set('operations', JSON.stringify({ query: PAY_BY_ARGUMENT(key) }));
    multipart.set('map', '{}');
    return [
      ['application/x-www-form-urlencoded', new URLSearchParams({ query: PAY_BY_ARGUMENT(key) })],
      ['multipart/form-data', multipart],
    ] as const;
  };

  it("a GraphQL mutation sent as a plain HTML form would send it (urlencoded, multipart) is refused by Yoga's CSRF plugin (403) on any origin, and nothing is charged", async () => {
    for (const origin of ['http://evil.localhost:4000', SHOP]) {
      for (const [type, body] of formBodies(newKey())) {
        const before = await ledger(example.url);
        const response = await fetch(`${example.url}/graphql`, { method: 'POST', headers: { origin }, body });
        // Yoga's own answer (useCSRFPrevention): 403 and its message, no code of idem's.
        expect(response.status, type).toBe(403);
        expect((await response.json()).errors[0].message).toBe('Required CSRF header(s) not present');
        expect(await ledger(example.url)).toEqual(before);
      }
    }
  });

  it('the same body with a header a form cannot send (Idempotency-Key, which made the browser ask first) is served', async () => {
    const key = newKey();
    const [, body] = formBodies(key)[0]!;
    const response = await fetch(`${example.url}/graphql`, {
      method: 'POST',
      headers: { 'idempotency-key': key },
      body,
    });
    expect(response.status).toBe(200);
    expect((await response.json()).data.createPayment.id).toMatch(/^pay_/);
  });

  it('tRPC refuses them too (415), as before', async () => {
    const response = await fetch(`${example.url}/trpc/payments.create`, {
      method: 'POST',
      body: new URLSearchParams({ amount: '4200', currency: 'EUR', idempotencyKey: newKey() }),
    });
    expect(response.status).toBe(415);
  });
});

describe('S1: a scope longer than the store can key', () => {
  const longAccount = 'a'.repeat(MAX_SCOPE_BYTES);

  it.each([
    ['tRPC', (key: string) => mutate(example.url, 'payments.create', PAYMENT, headers(key))],
    ['GraphQL', (key: string) => graphql(example.url, PAY_BY_ARGUMENT(key), { headers: headers(undefined) })],
  ])(
    '%s: 400 idempotency_scope_too_long saying what is too long, never a 503 "retry later"; nothing charged',
    async (name, send) => {
      const before = await ledger(example.url);
      const answer = await send(newKey());
      expect(answer.status).toBe(400);
      expect(answer.headers.get('retry-after')).toBeNull();
      const problem =
        name === 'tRPC' ? answer.body.error.data.idempotency : answer.body.errors[0].extensions.idempotency;
      expect(problem).toMatchObject({ code: 'idempotency_scope_too_long', status: 400 });
      expect(problem.detail).toContain(`at most ${MAX_SCOPE_BYTES} can be stored`);
      expect(problem.detail).toContain('principal');
      expect(await ledger(example.url)).toEqual(before);
      expect((await get(example.url, '/healthz')).status).toBe(200);
    },
  );

  function headers(key: string | undefined): Record<string, string> {
    return { authorization: `Bearer ${longAccount}`, ...(key ? { 'idempotency-key': key } : {}) };
  }
});

describe('K1/K2/K4: the Idempotency-Key header as sent', () => {
  it('K2/K4: an empty quoted header ("") is no key, so the field key beside it applies, on both transports', async () => {
    const trpcKey = newKey();
    const first = await mutate(
      example.url,
      'payments.create',
      { ...PAYMENT, idempotencyKey: trpcKey },
      { 'idempotency-key': '""' },
    );
    expect(first.status).toBe(200);
    const again = await mutate(example.url, 'payments.create', { ...PAYMENT, idempotencyKey: trpcKey });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body.result.data.id).toBe(first.body.result.data.id);

    const graphqlKey = newKey();
    const byGraphql = await graphql(example.url, PAY_BY_ARGUMENT(graphqlKey), { headers: { 'idempotency-key': '""' } });
    expect(byGraphql.status).toBe(200);
    const replay = await graphql(example.url, PAY_BY_ARGUMENT(graphqlKey));
    expect(replay.body.data.createPayment.id).toBe(byGraphql.body.data.createPayment.id);
    expect(replay.body.extensions.idempotency.replayed).toBe(true);
  });

  it('K1: a bare key with a comma is refused with 400 saying that a comma separates values and showing the quoted form', async () => {
    const trpc = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': 'ab,cd' });
    const byGraphql = await graphql(
      example.url,
      'mutation { createPayment(input: {amount: 4200, currency: "EUR"}) { id } }',
      { headers: { 'idempotency-key': 'ab,cd' } },
    );
    for (const [answer, problem] of [
      [trpc, trpc.body.error.data.idempotency],
      [byGraphql, byGraphql.body.errors[0].extensions.idempotency],
    ] as const) {
      expect(answer.status).toBe(400);
      expect(problem.code).toBe('idempotency_key_invalid');
      expect(problem.detail).toContain('a bare key contains a comma');
      expect(problem.detail).toContain('Idempotency-Key: "ab,cd"');
    }
  });
});

describe('CORS on every answer to an allowed origin', () => {
  it.each([
    ['tRPC', '/trpc/payments.create', JSON.stringify(PAYMENT)],
    ['GraphQL', '/graphql', JSON.stringify({ query: PAY_BY_ARGUMENT('order-401') })],
  ])(
    '%s: the 401 for bad credentials carries Access-Control-Allow-Origin, so the page can read it',
    async (_, path, body) => {
      const response = await fetch(`${example.url}${path}`, {
        method: 'POST',
        headers: { origin: SHOP, 'content-type': 'application/json', authorization: 'Basic YWxpY2U6eA==' },
        body,
      });
      expect(response.status).toBe(401);
      expect(response.headers.get('access-control-allow-origin')).toBe(SHOP);
      expect(response.headers.get('access-control-expose-headers')?.toLowerCase()).toContain('retry-after');
      const other = await fetch(`${example.url}${path}`, {
        method: 'POST',
        headers: { origin: 'null', 'content-type': 'application/json', authorization: 'Basic YWxpY2U6eA==' },
        body,
      });
      expect(other.status).toBe(401);
      expect(other.headers.get('access-control-allow-origin')).toBeNull();
    },
  );
});

describe('the statuses the README states', () => {
  /** The rows of the README's table of GraphQL refusals: `| what | Accept | status |`. */
  function readmeRows(): Array<{ what: string; accept: string; status: number }> {
    const start = README.indexOf('| GraphQL request');
    expect(start, 'the README table of GraphQL statuses').toBeGreaterThan(-1);
    const lines = README.slice(start).split('\n').slice(2);
    // The table ends at its first line that is not a row (later tables are not its rows).
    const end = lines.findIndex((line) => !line.startsWith('|'));
    return lines
      .slice(0, end < 0 ? undefined : end)
      .map((line) => line.split('|').map((cell) => cell.trim().replaceAll('`', '')))
      .map(([, what, accept, status]) => ({ what: what!, accept: accept!, status: Number(status) }));
  }
  const deep = `{ ledger { id ${'id '.repeat(1200)}} }`;

  it('GraphQL-over-HTTP: graphql-armor refusals and validation errors answer as the README table says, per media type, and run nothing', async () => {
    const rows = readmeRows();
    expect(rows.length).toBe(8);
    for (const { what, accept, status } of rows) {
      const query = what.includes('token') ? deep : '{ ledger { nope } }';
      const response = await fetch(`${example.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(accept === '(none)' ? {} : { accept }) },
        body: JSON.stringify({ query }),
      });
      const body = await response.json();
      expect(response.status, `${what} with Accept ${accept}`).toBe(status);
      expect(body.data, 'nothing ran').toBeUndefined();
      expect(body.errors.length).toBeGreaterThan(0);
    }
  });

  it('a multipart body over the 64 KiB limit sent without Content-Length (chunked) is 413, as the README says of every body', async () => {
    expect(README).toMatch(/413\*\* as it streams in[^.]*with or without `Content-Length`/);
    const form = new FormData();
    form.set('operations', JSON.stringify({ query: '{ ledger { id } }', variables: { padding: 'x'.repeat(100_000) } }));
    form.set('map', '{}');
    const encoded = new Request('http://encode.test', { method: 'POST', body: form });
    const bytes = new Uint8Array(await encoded.arrayBuffer());
    const chunks = [bytes];
    const response = await fetch(`${example.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': encoded.headers.get('content-type')!, 'x-graphql-yoga-csrf': '1' },
      body: new ReadableStream({ pull: (c) => (chunks.length ? c.enqueue(chunks.shift()!) : c.close()) }),
      duplex: 'half',
    } as RequestInit);
    expect(response.status).toBe(413);
  });
});

describe('unexpected errors reach the client as a generic message; the cause stays in the server log', () => {
  let logged: string[];
  beforeAll(() => {
    logged = [];
    vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => void logged.push(args.join(' ')));
  });
  afterEach(() => {
    // Puts the ledger back if a test failed before it did.
    const [moved] = target.db.all<{ n: number }>(
      sql`SELECT count(*) AS n FROM sqlite_master WHERE name = 'payments_ledger_away'`,
    );
    if (moved!.n > 0) target.db.run(sql`ALTER TABLE payments_ledger_away RENAME TO payments_ledger`);
  });
  afterAll(() => vi.restoreAllMocks());

  it('a database error (its SQL and parameters) is never in an answer, first or replayed, on either transport; a lost ledger write is a 503 that leaves the key free', async () => {
    await target.db.run(sql`ALTER TABLE payments_ledger RENAME TO payments_ledger_away`);
    const trpcLedger = await get(example.url, '/trpc/payments.ledger');
    const graphqlLedger = await graphql(example.url, '{ ledger { id } }');
    const trpcKey = newKey();
    const trpcPay = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': trpcKey });
    const graphqlKey = newKey();
    const graphqlPay = await graphql(example.url, PAY_BY_ARGUMENT(graphqlKey));
    for (const answer of [trpcLedger, graphqlLedger, trpcPay, graphqlPay])
      expect(answer.text).not.toMatch(/payments_ledger|Failed query|SELECT|INSERT|no such table/i);
    expect(trpcLedger.status).toBe(500);
    expect(trpcLedger.body.error.message).toBe(UNEXPECTED_ERROR_MESSAGE);
    expect(graphqlLedger.body.errors[0].message).toBe(UNEXPECTED_ERROR_MESSAGE);
    expect(trpcPay.status).toBe(503);
    expect(graphqlPay.status).toBe(503);
    expect(logged.join('\n')).toMatch(/no such table: payments_ledger/);

    // Nothing was charged and nothing stored: with the ledger back, the same keys charge once.
    await target.db.run(sql`ALTER TABLE payments_ledger_away RENAME TO payments_ledger`);
    const before = await ledger(example.url);
    expect((await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': trpcKey })).status).toBe(200);
    expect((await graphql(example.url, PAY_BY_ARGUMENT(graphqlKey))).body.data.createPayment.id).toMatch(/^pay_/);
    expect((await ledger(example.url)).length).toBe(before.length + 2);
  });

  it("the channel's own failure after it charged (amount 13) keeps its message: it is meant for the client", async () => {
    const failed = await mutate(
      example.url,
      'payments.create',
      { amount: 13, currency: 'EUR' },
      { 'idempotency-key': newKey() },
    );
    expect(failed.status).toBe(500);
    expect(failed.body.error.message).toBe('payment channel failed unexpectedly after charging 13 EUR');
  });
});

describe('events: an operator can find every failed outcome', () => {
  const completed = (key: string) =>
    eventsOf(key).find(
      (event): event is Extract<IdempotencyEvent, { type: 'completed' }> => event.type === 'completed',
    );

  it('a GraphQL result with errors is announced withErrors: true (status 200), a success withErrors: false, on both transports; replays too', async () => {
    const failing = newKey();
    const failed = await graphql(
      example.url,
      `mutation { createPayment(input: {amount: 13, currency: "EUR"}, idempotencyKey: "${failing}") { id } }`,
    );
    expect(failed.body.errors[0].message).toContain('payment channel failed');
    expect(completed(failing)).toMatchObject({ outcomeKind: 'success', status: 200, withErrors: true });
    await graphql(
      example.url,
      `mutation { createPayment(input: {amount: 13, currency: "EUR"}, idempotencyKey: "${failing}") { id } }`,
    );
    expect(eventsOf(failing).find((event) => event.type === 'replayed')).toMatchObject({ withErrors: true });

    const succeeding = newKey();
    await graphql(example.url, PAY_BY_ARGUMENT(succeeding));
    expect(completed(succeeding)).toMatchObject({ outcomeKind: 'success', withErrors: false });

    const trpcFailing = newKey();
    await mutate(example.url, 'payments.create', { amount: 13, currency: 'EUR' }, { 'idempotency-key': trpcFailing });
    expect(completed(trpcFailing)).toMatchObject({ outcomeKind: 'error', status: 500, withErrors: true });
  });
});

describe('S1 on PostgreSQL: the longest scope idem accepts fits its primary key', () => {
  let pg: PostgresTarget;
  let onPg: RunningExample;
  beforeAll(async () => {
    pg = await openPostgresTarget({ schemaPrefix: 'idem_example_scope' });
    await migrateExample(pg.db);
    onPg = await startExample(pg.db);
  });
  afterAll(async () => {
    await onPg?.close();
    await pg?.close();
  });

  it('a scope of exactly the limit with a 255-character key executes and replays; one byte more is 400, not 503', async () => {
    // `<account>/payments.create`: the account fills the scope to the limit.
    const fits = 'f'.repeat(MAX_SCOPE_BYTES - '/payments.create'.length);
    const key = `k${newKey()}`.padEnd(255, 'k');
    const first = await mutate(onPg.url, 'payments.create', PAYMENT, {
      authorization: `Bearer ${fits}`,
      'idempotency-key': key,
    });
    expect(first.status).toBe(200);
    const again = await mutate(onPg.url, 'payments.create', PAYMENT, {
      authorization: `Bearer ${fits}`,
      'idempotency-key': key,
    });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    const over = await mutate(onPg.url, 'payments.create', PAYMENT, {
      authorization: `Bearer ${fits}x`,
      'idempotency-key': key,
    });
    expect(over.status).toBe(400);
    expect(over.body.error.data.idempotency.code).toBe('idempotency_scope_too_long');
  });

  it('a scope far over the limit (3,000 bytes, past the btree row limit) is 400 on both transports, not a permanent 503', async () => {
    // Random, so that PostgreSQL cannot compress it under the row limit.
    const huge = randomBytes(1500).toString('hex');
    const trpc = await mutate(onPg.url, 'payments.create', PAYMENT, {
      authorization: `Bearer ${huge}`,
      'idempotency-key': newKey(),
    });
    const byGraphql = await graphql(onPg.url, PAY_BY_ARGUMENT(newKey()), {
      headers: { authorization: `Bearer ${huge}` },
    });
    expect([trpc.status, byGraphql.status]).toEqual([400, 400]);
  });
});
