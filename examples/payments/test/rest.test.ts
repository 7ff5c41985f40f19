/**
 * `POST /v1/payments`, the example's plain HTTP route (Hono with `@idem/fetch/hono`), black-box
 * over real HTTP on SQLite and PostgreSQL: the README's curl answers (201, a byte-identical
 * replay, 422, 400), what is refused before the channel (401, 400, 413: nothing stored), a 500
 * after the channel charged (stored and replayed, E4), the ledger it shares with tRPC, and the
 * incident on this route: a retry past the retention charges again, and says so (R2).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDrizzleStore, type DrizzleDatabase } from '@idem/drizzle';
import { formatScope } from '@idem/core';
import { openPostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import { untilExpired } from '../../../test/support/waiting.ts';
import { ledger, migrateExample, mutate, newKey, startExample, type Reply, type RunningExample } from './http.ts';

const PAYMENT = { amount: 4200, currency: 'EUR' };

const databases: Array<{ name: string; open(): Promise<{ db: DrizzleDatabase; close(): Promise<void> }> }> = [
  { name: 'SQLite', open: () => openSqliteTarget() },
  { name: 'PostgreSQL', open: () => openPostgresTarget({ schemaPrefix: 'idem_example_rest' }) },
];

async function pay(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const response = await fetch(`${url}/v1/payments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, headers: response.headers, text, body: parsed };
}

describe.each(databases)('POST /v1/payments on $name', ({ open }) => {
  let database: { db: DrizzleDatabase; close(): Promise<void> };
  let example: RunningExample;
  let shortLived: RunningExample;
  beforeAll(async () => {
    database = await open();
    await migrateExample(database.db);
    example = await startExample(database.db, { IDEM_TTL: '30m' });
    shortLived = await startExample(database.db, { IDEM_TTL: '2s', IDEM_LEASE: '1s' });
  });
  afterAll(async () => {
    await shortLived?.close();
    await example?.close();
    await database?.close();
  });
  const charged = async (since: number) => (await ledger(example.url)).slice(since);

  it('E1/E2/F3: the curl pair — 201 with Location, the byte-identical replay with Idempotent-Replayed, 422 for another amount; one charge', async () => {
    const before = (await ledger(example.url)).length;
    const key = newKey();
    const first = await pay(example.url, PAYMENT, { 'idempotency-key': key });
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ ...PAYMENT, id: expect.stringMatching(/^pay_/) });
    expect(first.headers.get('location')).toBe(`/v1/payments/${first.body.id}`);
    expect(first.headers.get('idempotent-replayed')).toBeNull();

    const replay = await pay(example.url, PAYMENT, { 'idempotency-key': `"${key}"` });
    expect([replay.status, replay.text, replay.headers.get('idempotent-replayed')]).toEqual([201, first.text, 'true']);
    expect(replay.headers.get('location')).toBe(first.headers.get('location'));

    const reused = await pay(example.url, { ...PAYMENT, amount: 4300 }, { 'idempotency-key': key });
    expect([reused.status, reused.headers.get('content-type'), reused.body.code]).toEqual([
      422,
      'application/problem+json',
      'idempotency_key_reused',
    ]);
    expect(reused.body.type).toBe(`${example.url}/idempotency#idempotency_key_reused`);
    expect(await charged(before)).toEqual([{ id: first.body.id, ...PAYMENT }]);

    const read = await fetch(`${example.url}${first.headers.get('location')}`);
    expect(await read.json()).toEqual({ id: first.body.id, ...PAYMENT });
  });

  it('K2: without a key, 400 idempotency_key_missing, nothing charged', async () => {
    const before = (await ledger(example.url)).length;
    const refused = await pay(example.url, PAYMENT);
    expect([refused.status, refused.body.code]).toEqual([400, 'idempotency_key_missing']);
    expect(await charged(before)).toEqual([]);
  });

  it('E4: what is refused before the channel is never stored — bad credentials (401), an invalid amount (400), a body over the limit (413); the corrected request with the same key charges once', async () => {
    const before = (await ledger(example.url)).length;
    const key = newKey();
    const unauthorized = await pay(example.url, PAYMENT, { 'idempotency-key': key, authorization: 'Basic eA==' });
    expect([unauthorized.status, unauthorized.headers.get('www-authenticate')]).toEqual([
      401,
      'Bearer realm="payments"',
    ]);
    const invalid = await pay(example.url, { amount: 0, currency: 'EUR' }, { 'idempotency-key': key });
    expect([invalid.status, invalid.headers.get('content-type')]).toEqual([400, 'application/problem+json']);
    const tooLarge = await pay(example.url, { ...PAYMENT, note: 'x'.repeat(70_000) }, { 'idempotency-key': key });
    expect(tooLarge.status).toBe(413);
    expect(await createDrizzleStore(database.db).get(formatScope('POST /v1/payments', 'public'), key)).toBeNull();

    const executed = await pay(example.url, PAYMENT, { 'idempotency-key': key });
    expect([executed.status, executed.headers.get('idempotent-replayed')]).toEqual([201, null]);
    expect(await charged(before)).toHaveLength(1);
  });

  it('E4: amount 13 charges and then fails: the 500 is stored and replayed, one charge', async () => {
    const before = (await ledger(example.url)).length;
    const key = newKey();
    const failed = await pay(example.url, { amount: 13, currency: 'EUR' }, { 'idempotency-key': key });
    const replay = await pay(example.url, { amount: 13, currency: 'EUR' }, { 'idempotency-key': key });
    expect(failed.status).toBe(500);
    expect(failed.body).toEqual({
      type: 'about:blank',
      title: 'Internal Server Error',
      status: 500,
      detail: 'The payment could not be completed.',
    });
    expect([replay.status, replay.text, replay.headers.get('idempotent-replayed')]).toEqual([500, failed.text, 'true']);
    expect((await charged(before)).map(({ amount }) => amount)).toEqual([13]);
  });

  it('S1: the same key on tRPC payments.create and on POST /v1/payments is two records of one ledger', async () => {
    const before = (await ledger(example.url)).length;
    const key = newKey();
    const viaTrpc = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
    const viaRest = await pay(example.url, PAYMENT, { 'idempotency-key': key });
    expect([viaTrpc.status, viaRest.status, viaRest.headers.get('idempotent-replayed')]).toEqual([200, 201, null]);
    expect((await charged(before)).map(({ id }) => id)).toEqual([viaTrpc.body.result.data.id, viaRest.body.id]);
  });

  it('R2 (the incident): a retry inside the retention is replayed; the last retry, after it, charges again — and the reuse is an expiredKeyReused event with the earlier generation', async () => {
    const before = (await ledger(shortLived.url)).length;
    const key = newKey();
    const first = await pay(shortLived.url, PAYMENT, { 'idempotency-key': key });
    const retry = await pay(shortLived.url, PAYMENT, { 'idempotency-key': key });
    expect([first.status, retry.text, retry.headers.get('idempotent-replayed')]).toEqual([201, first.text, 'true']);

    const scope = formatScope('POST /v1/payments', 'public');
    await untilExpired(createDrizzleStore(database.db), scope, key);
    const late = await pay(shortLived.url, PAYMENT, { 'idempotency-key': key });
    expect([late.status, late.headers.get('idempotent-replayed')]).toEqual([201, null]);
    expect(late.body.id).not.toBe(first.body.id);
    expect((await ledger(shortLived.url)).slice(before).map(({ id }) => id)).toEqual([first.body.id, late.body.id]);
    expect(shortLived.events.find((event) => event.type === 'expiredKeyReused' && event.key === key)).toMatchObject({
      scope,
      generation: 2,
      previous: { generation: 1, status: 201 },
    });
  });
});
