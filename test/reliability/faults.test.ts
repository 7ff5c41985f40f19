/**
 * Scenario 2, database faults (E5, E6, E7): a TCP proxy sits between an in-process app (the tRPC,
 * GraphQL and plain HTTP adapters over one `createDrizzleStore`) and PostgreSQL, and the test cuts it at chosen
 * moments: before the claim, while the handler runs (held at a gate), and when the outcome
 * write is on the wire (the connection that sends the `complete` statement is cut). Checks of
 * what was stored go over the test's own connection, never through the proxy. Lease: 3 s.
 *
 * Needs a PostgreSQL server (a proxy cannot stand in front of PGlite): skipped on PGlite.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createDrizzleStore } from '@idem/drizzle';
import { openDatabase, type OpenedDatabase } from '@idem/drizzle/connect';
import type { IdempotencyEvent } from '@idem/core';
import { POSTGRES_SCHEMA, postgresAddress, STORE_OPTIONS, type SharedDatabase } from './support/databases.ts';
import { startTcpProxy, type TcpProxy } from './support/tcp-proxy.ts';
import {
  createCountingApp,
  httpOrders,
  IN_PROCESS,
  ORDER_ENDPOINTS,
  type CountingApp,
} from './support/counting-app.ts';
import { sleep } from './support/http.ts';
import { untilLeaseEnds } from '../support/waiting.ts';

const LEASE_MS = 3000;
/** The named prepared statement that stores an outcome (packages/drizzle/src/pg/statements.ts). */
const COMPLETE_STATEMENT = 'idem:complete:';
/** The prepared renewal of a claim's lease (E6). */
const RENEW_STATEMENT = 'idem:renew:';

describe.skipIf(!POSTGRES_SCHEMA.available)('PostgreSQL faults between the app and its store (TCP proxy)', () => {
  let database: SharedDatabase;
  let proxy: TcpProxy;
  let opened: OpenedDatabase;
  let app: CountingApp;

  beforeAll(async () => {
    database = await POSTGRES_SCHEMA.open();
    proxy = await startTcpProxy(postgresAddress());
    opened = await openDatabase(proxy.urlFor(database.url), { connectionTimeoutMillis: 2000 });
    app = createCountingApp({ store: createDrizzleStore(opened.db, STORE_OPTIONS), lease: LEASE_MS });
  });

  afterAll(async () => {
    proxy?.passThrough();
    proxy?.clearDropRules();
    app?.gate.open();
    await app?.drain();
    await opened?.close();
    await proxy?.close();
    await database?.close();
  });

  beforeEach(() => {
    proxy.passThrough();
    proxy.clearDropRules();
    app.gate.open();
  });

  const eventOf = (type: IdempotencyEvent['type'], key: string) => (event: IdempotencyEvent) =>
    event.type === type && event.key === key;

  describe.each([...ORDER_ENDPOINTS, httpOrders])('$name', (endpoint) => {
    const account = `acct_${endpoint.name.toLowerCase()}`;
    const create = (key: string, amount = 100) =>
      endpoint.create(endpoint.handler(app), IN_PROCESS, { amount }, { key, account });
    const record = (key: string) => database.store.get(endpoint.scope(account), key);

    it('E5: PostgreSQL unreachable before the claim → 503 + Retry-After, the handler does not run, nothing is stored; the same key runs once it is back', async () => {
      const key = `fault-a-${randomUUID()}`;
      proxy.refuseNewConnections();
      proxy.destroyOpenSockets();
      const before = app.executions;

      const refused = await create(key);
      expect(refused.status).toBe(503);
      expect(refused.retryAfter).toBe('2');
      expect(endpoint.problemCode(refused)).toBe('idempotency_store_unavailable');
      expect(app.executions).toBe(before);
      expect(await record(key)).toBeNull();

      proxy.passThrough();
      const executed = await create(key);
      expect(executed.status).toBe(200);
      expect(executed.replayed).toBe(false);
      expect(app.executions).toBe(before + 1);
    });

    it('connections dropped while the handler runs → the handler finishes, its outcome is stored over a new connection: 200, then a replay; one execution', async () => {
      const key = `fault-b-${randomUUID()}`;
      app.gate.close();
      const pending = create(key);
      await app.gate.whenWaiting(1);
      const before = app.executions;
      const destroyed = proxy.destroyOpenSockets();
      expect(destroyed).toBeGreaterThan(0);
      // The handler keeps running a little after the drop, as a real one would.
      await sleep(100);
      app.gate.open();

      const first = await pending;
      expect(first.status).toBe(200);
      expect(first.replayed).toBe(false);
      expect(await record(key)).toMatchObject({ state: 'completed', outcome: { status: 200 } });
      const replay = await create(key);
      expect(replay.status).toBe(200);
      expect(replay.replayed).toBe(true);
      expect(endpoint.order(replay)).toEqual(endpoint.order(first));
      expect(app.executions).toBe(before);
      const storeErrors = app.events.filter(eventOf('storeError', key));
      console.info(
        `[reliability] fault (b) ${endpoint.name}: destroyed ${destroyed} connection(s) mid-handler; storeError events: ${storeErrors.length}`,
      );
    });

    it('E7: the outcome write is cut on the wire → the client still gets the real outcome, retries within the lease get 409 (no second execution), the retried write lands once PostgreSQL answers, then replays', async () => {
      const key = `fault-c-${randomUUID()}`;
      proxy.dropWhenClientSends(COMPLETE_STATEMENT);
      const before = app.executions;
      const droppedBefore = proxy.stats.dropped;

      const first = await create(key);
      expect(first.status).toBe(200);
      expect(first.replayed).toBe(false);
      expect(endpoint.order(first)?.execution).toBe(before + 1);
      await app.waitForEvent(
        (event) =>
          eventOf('storeError', key)(event) &&
          event.type === 'storeError' &&
          event.storeOperation === 'complete' &&
          event.willRetry,
      );
      expect(proxy.stats.dropped).toBeGreaterThan(droppedBefore);
      expect(await record(key)).toMatchObject({ state: 'processing', outcome: null });

      const retries = [];
      for (let i = 0; i < 3; i++) retries.push(await create(key));
      expect(retries.map((answer) => [answer.status, answer.retryAfter, endpoint.problemCode(answer)])).toEqual(
        Array(3).fill([409, '1', 'idempotency_request_in_progress']),
      );
      expect(app.executions).toBe(before + 1);

      proxy.clearDropRules();
      await app.waitForEvent(eventOf('completed', key), LEASE_MS + 1000);
      const replay = await create(key);
      expect(replay.status).toBe(200);
      expect(replay.replayed).toBe(true);
      expect(endpoint.order(replay)).toEqual(endpoint.order(first));
      expect(app.executions).toBe(before + 1);
      expect(await record(key)).toMatchObject({ state: 'completed', takeovers: 0 });
      const failedWrites = app.events.filter(eventOf('storeError', key)).length;
      console.info(
        `[reliability] fault (c) ${endpoint.name}: ${proxy.stats.dropped - droppedBefore} outcome write(s) cut, ${failedWrites} storeError event(s), 3 retries → 409, then the retried write landed; 1 execution`,
      );
    });

    it('E7/E5: PostgreSQL goes away after the handler started → the client gets the real outcome, retries get 503 (fail closed, no execution), and once it is back the retried write lands and replays', async () => {
      const key = `fault-c2-${randomUUID()}`;
      app.gate.close();
      const pending = create(key);
      await app.gate.whenWaiting(1);
      const before = app.executions;
      proxy.refuseNewConnections();
      proxy.destroyOpenSockets();
      app.gate.open();

      const first = await pending;
      expect(first.status).toBe(200);
      expect(first.replayed).toBe(false);
      const retry = await create(key);
      expect(retry.status).toBe(503);
      expect(retry.retryAfter).toBe('2');
      expect(app.executions).toBe(before);

      proxy.passThrough();
      await app.waitForEvent(eventOf('completed', key), LEASE_MS + 1000);
      const replay = await create(key);
      expect(replay.replayed).toBe(true);
      expect(endpoint.order(replay)).toEqual(endpoint.order(first));
      expect(app.executions).toBe(before);
    });

    it('E7 then E6: the outcome write keeps failing past the lease → a retry inside the lease gets 409, the engine gives up, the next retry after the lease takes the claim over (staleTakeover, takeovers 1) and the handler runs a second time', async () => {
      const key = `fault-c3-${randomUUID()}`;
      proxy.dropWhenClientSends(COMPLETE_STATEMENT);
      const before = app.executions;

      const first = await create(key);
      expect(first.status).toBe(200);
      // While the engine still retries the write, the lease runs: the claim is not handed over (E7).
      await app.waitForEvent(
        (event) =>
          event.type === 'storeError' && event.key === key && event.storeOperation === 'complete' && event.willRetry,
      );
      const inside = await create(key);
      expect([inside.status, endpoint.problemCode(inside)]).toEqual([409, 'idempotency_request_in_progress']);
      const gaveUp = await app.waitForEvent(
        (event) => event.type === 'storeError' && event.key === key && !event.willRetry,
        LEASE_MS + 2000,
      );
      const claimed = await record(key);
      expect(claimed).toMatchObject({ state: 'processing', takeovers: 0 });
      const leaseLeft = claimed!.leaseUntil.getTime() - Date.now();
      await untilLeaseEnds(database.store, endpoint.scope(account), key);
      proxy.clearDropRules();

      const takenOver = await create(key);
      expect(takenOver.status).toBe(200);
      expect(takenOver.replayed).toBe(false);
      expect(app.executions).toBe(before + 2);
      expect(endpoint.order(takenOver)?.execution).toBe(before + 2);
      expect(app.events.filter(eventOf('staleTakeover', key))).toEqual([
        expect.objectContaining({ takeovers: 1, generation: 1 }),
      ]);
      const [timeline] = await database.store.timeline(endpoint.scope(account), key);
      expect(timeline).toMatchObject({ generation: 1, takeovers: 1, status: 200, state: 'completed' });
      console.info(
        `[reliability] fault (c3) ${endpoint.name}: the engine stopped retrying the write ${Math.round(leaseLeft)} ms before the lease ended (${JSON.stringify({ type: gaveUp.type })}); after the lease the retry took over: 2 executions, takeovers 1`,
      );
    });

    it('E6: an owner whose renewals cannot reach the store is taken over once its lease passes; when it finishes, its late write is refused (fenced) and the new outcome is the one replayed', async () => {
      const key = `fence-${randomUUID()}`;
      const before = app.executions;
      app.gate.close();
      // The owner lives but cannot renew: every connection that sends its renewal is cut.
      proxy.dropWhenClientSends(RENEW_STATEMENT);
      const stale = create(key);
      try {
        await app.gate.whenWaiting(1);
        await untilLeaseEnds(database.store, endpoint.scope(account), key);
        await app.waitForEvent(
          (event) => event.type === 'leaseLost' && event.key === key && event.reason === 'unreachable',
        );
      } finally {
        proxy.clearDropRules();
      }
      const fresh = create(key);
      await app.gate.whenWaiting(2);
      await app.waitForEvent(eventOf('staleTakeover', key));
      app.gate.open();

      const [staleAnswer, freshAnswer] = await Promise.all([stale, fresh]);
      expect(staleAnswer.status).toBe(200);
      expect(freshAnswer.status).toBe(200);
      expect(app.executions).toBe(before + 2);
      await app.waitForEvent(eventOf('fenced', key));
      expect(app.events.filter(eventOf('completed', key))).toHaveLength(1);
      const replay = await create(key);
      expect(replay.replayed).toBe(true);
      expect(endpoint.order(replay)).toEqual(endpoint.order(freshAnswer));
      expect(endpoint.order(replay)).not.toEqual(endpoint.order(staleAnswer));
    });

    it('E7: the failed outcome write is retried until the lease ends (a last attempt shortly before it), as README.md says', async () => {
      const key = `fault-e7-${randomUUID()}`;
      proxy.dropWhenClientSends(COMPLETE_STATEMENT);
      try {
        expect((await create(key)).status).toBe(200);
        const gaveUp = await app.waitForEvent(
          (event) => event.type === 'storeError' && event.key === key && !event.willRetry,
          LEASE_MS + 2000,
        );
        const gaveUpAt = Date.now();
        const claimed = await record(key);
        const leaseLeft = claimed!.leaseUntil.getTime() - gaveUpAt;
        const attempts = app.events.filter((event) => event.type === 'storeError' && event.key === key).length;
        console.info(
          `[reliability] E7 ${endpoint.name}: ${attempts} failed outcome writes; the last one ended ${leaseLeft} ms before the lease (${gaveUp.type})`,
        );
        expect(leaseLeft).toBeLessThan(400);
        expect(attempts).toBeGreaterThanOrEqual(3);
      } finally {
        proxy.clearDropRules();
      }
    });

    it('service resumes when PostgreSQL is reachable again, without restarting the app: 503s while it is down, then every key executes once', async () => {
      const keys = Array.from({ length: 5 }, () => `resume-${randomUUID()}`);
      proxy.refuseNewConnections();
      proxy.destroyOpenSockets();
      const before = app.executions;
      const down = await Promise.all(keys.map((key) => create(key)));
      expect(down.map((answer) => answer.status)).toEqual(Array(5).fill(503));
      expect(app.executions).toBe(before);

      proxy.passThrough();
      const up = await Promise.all(keys.map((key) => create(key)));
      expect(up.map((answer) => [answer.status, answer.replayed])).toEqual(Array(5).fill([200, false]));
      expect(app.executions).toBe(before + 5);
      for (const key of keys) expect(await record(key)).toMatchObject({ state: 'completed' });
    });
  });
});
