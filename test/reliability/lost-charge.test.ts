/**
 * A lost connection inside the charge (E4), without atomic mode: the example's ledger INSERT goes
 * over a TCP proxy to PostgreSQL, and the test cuts that connection — before the statement
 * reaches the server (nothing was charged), or right after it (the server ran and committed it,
 * the answer is lost). E4 stores every failure of a handler that started, so before the fix each
 * cut spent its key: the failure (with its SQL) was replayed for the whole retention and no
 * retry could charge. The example now looks the charge up by its downstream key: found, it is the
 * answer; not found, the key is given back (`notStarted(ctx, error)`): a 503 whose retry charges
 * once. Every transport: tRPC, GraphQL and the plain HTTP route; checks go over the test's own connection.
 *
 * Needs a PostgreSQL server (a proxy cannot stand in front of PGlite): skipped on PGlite.
 */
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { openDatabase, type OpenedDatabase } from '@idem/drizzle/connect';
import type { IdempotencyEvent } from '@idem/core';
import { createPaymentsApp, type PaymentsApp } from '../../examples/payments/src/app.ts';
import { PaymentChannel } from '../../examples/payments/src/channel.ts';
import { GROUP_COMMIT, POSTGRES_SCHEMA, postgresAddress, type SharedDatabase } from './support/databases.ts';
import { startTcpProxy, type TcpProxy } from './support/tcp-proxy.ts';

/** A payment answer of either transport. */
interface Paid {
  result?: { data?: { id?: string } };
  data?: { createPayment?: { id?: string } };
  id?: string;
}

/** What the example's ledger INSERT sends (its Parse message holds the statement's text). */
const LEDGER_INSERT = 'INSERT INTO payments_ledger';

describe.skipIf(!POSTGRES_SCHEMA.available)('E4: the connection lost inside the charge (example, PostgreSQL)', () => {
  let database: SharedDatabase;
  let proxy: TcpProxy;
  let opened: OpenedDatabase;
  let app: PaymentsApp;
  let url: string;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    database = await POSTGRES_SCHEMA.open();
    await new PaymentChannel(database.db).migrate();
    proxy = await startTcpProxy(postgresAddress());
    opened = await openDatabase(proxy.urlFor(database.url), { connectionTimeoutMillis: 2000 });
    app = createPaymentsApp({
      db: opened.db,
      groupCommit: GROUP_COMMIT,
      retentionMs: 60_000,
      leaseMs: 10_000,
      onEvent: (event) => events.push(event),
    });
    await new Promise<void>((resolve) => app.server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    // The example logs the cause of a lost write; keep the test's output readable.
    vi.spyOn(console, 'error').mockImplementation(() => {});
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    proxy?.clearDropRules();
    app?.server.closeAllConnections();
    if (app) await new Promise((resolve) => app.server.close(resolve));
    await app?.drain();
    await opened?.close();
    await proxy?.close();
    await database?.close();
  });
  beforeEach(() => proxy.clearDropRules());

  /** Ledger rows of `account`, over the test's own connection. */
  const charges = async (account: string) => {
    const { rows } = await (
      database.db as unknown as {
        execute(query: unknown): Promise<{ rows: Array<{ n: string }> }>;
      }
    ).execute(sql`SELECT count(*) AS n FROM payments_ledger WHERE account = ${account}`);
    return Number(rows[0]!.n);
  };

  const transports = [
    {
      name: 'tRPC',
      pay: (account: string, key: string) =>
        fetch(`${url}/trpc/payments.create`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${account}`, 'idempotency-key': key },
          body: JSON.stringify({ amount: 4200, currency: 'EUR' }),
        }),
      id: (body: Paid) => body.result?.data?.id,
      paidStatus: 200,
    },
    {
      name: 'GraphQL',
      pay: (account: string, key: string) =>
        fetch(`${url}/graphql`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'application/graphql-response+json',
            authorization: `Bearer ${account}`,
          },
          body: JSON.stringify({
            query: `mutation { createPayment(input: {amount: 4200, currency: "EUR"}, idempotencyKey: "${key}") { id } }`,
          }),
        }),
      id: (body: Paid) => body.data?.createPayment?.id,
      paidStatus: 200,
    },
    {
      name: 'plain HTTP (POST /v1/payments)',
      pay: (account: string, key: string) =>
        fetch(`${url}/v1/payments`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${account}`, 'idempotency-key': key },
          body: JSON.stringify({ amount: 4200, currency: 'EUR' }),
        }),
      id: (body: Paid) => body.id,
      paidStatus: 201,
    },
  ];

  describe.each(transports)('$name', ({ pay, id, paidStatus }) => {
    it('the INSERT cut before it reaches PostgreSQL: 503 with no SQL in it, the key is free, and the retry charges once', async () => {
      const account = `lost-before-${randomUUID()}`;
      const key = `order-${randomUUID()}`;
      proxy.dropWhenClientSends(LEDGER_INSERT);
      const cut = await pay(account, key);
      const text = await cut.text();
      expect(proxy.stats.dropped).toBeGreaterThan(0);
      expect(cut.status).toBe(503);
      expect(text).not.toMatch(/payments_ledger|Failed query|params/i);
      expect(await charges(account)).toBe(0);
      expect(events.filter((event) => 'key' in event && event.key === key).map((event) => event.type)).toContain(
        'released',
      );

      proxy.clearDropRules();
      const retry = await pay(account, key);
      expect(retry.status).toBe(paidStatus);
      const paid = id((await retry.json()) as Paid);
      expect(paid).toMatch(/^pay_/);
      expect(await charges(account)).toBe(1);
      const replay = await pay(account, key);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(id((await replay.json()) as Paid)).toBe(paid);
      expect(await charges(account)).toBe(1);
    });

    it('the INSERT committed but its answer lost: the charge found by its downstream key is the answer, stored and replayed; one charge', async () => {
      const account = `lost-after-${randomUUID()}`;
      const key = `order-${randomUUID()}`;
      const cutBefore = proxy.stats.cutAfter;
      proxy.cutAfterClientSends(LEDGER_INSERT);
      const first = await pay(account, key);
      expect(proxy.stats.cutAfter).toBeGreaterThan(cutBefore);
      expect(first.status).toBe(paidStatus);
      const paid = id((await first.json()) as Paid);
      expect(paid).toMatch(/^pay_/);
      expect(await charges(account)).toBe(1);

      proxy.clearDropRules();
      const retry = await pay(account, key);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(id((await retry.json()) as Paid)).toBe(paid);
      expect(await charges(account)).toBe(1);
    });
  });
});
