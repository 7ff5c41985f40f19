/**
 * E6 and E3w over HTTP, against the example on SQLite and PostgreSQL, counting handler executions
 * (the `claimed` events of a key, across every process): a live owner's lease is renewed while its
 * handler runs, so a retry never runs it twice however slow it is; a dead owner (SIGKILL) or a
 * stalled one (SIGSTOP past its lease) is still taken over, and the stalled one's `claim.signal`
 * aborts (`leaseLost`); a duplicate with `IDEM_WAIT` gets the replay instead of 409.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExampleFleet, type ExampleServer } from './support/example-server.ts';
import { SHARED_DATABASES, type SharedDatabase } from './support/databases.ts';
import { graphqlPayments, restPayments, trpcPayments, type PaymentEndpoint } from './support/payments.ts';
import { sleep, type Answer } from './support/http.ts';

const LEASE_MS = 600;
const input = { amount: 420, currency: 'EUR' };

describe.each(SHARED_DATABASES)('E6/E3w on $label: renewed leases and waiting duplicates', ({ available, open }) => {
  const fleet = new ExampleFleet();
  let database: SharedDatabase;
  /** Every server of this database, for counting executions across processes. */
  const servers: ExampleServer[] = [];
  let slow: ExampleServer;
  let successor: ExampleServer;
  let doomed: ExampleServer;
  let waiting: ExampleServer;
  let impatient: ExampleServer;

  const executions = (key: string) =>
    servers.flatMap((server) => server.events).filter((event) => event.type === 'claimed' && event.key === key).length;
  const call = (server: ExampleServer, endpoint: PaymentEndpoint, key: string, account = 'acct_lease') =>
    endpoint.create(server.url, input, { key, account });

  beforeAll(async () => {
    if (!available) return;
    database = await open();
    const url = database.url;
    const lease = `${LEASE_MS}ms`;
    const started = await Promise.all([
      // A handler ten leases long.
      fleet.start({ databaseUrl: url, lease, channelDelayMs: LEASE_MS * 10, name: 'slow owner' }),
      fleet.start({ databaseUrl: url, lease, channelDelayMs: 50, name: 'successor' }),
      fleet.start({ databaseUrl: url, lease: '1s', channelDelayMs: 5_000, name: 'doomed owner' }),
      fleet.start({
        databaseUrl: url,
        channelDelayMs: 1_500,
        env: { IDEM_WAIT: '5s' },
        name: 'waiting (IDEM_WAIT=5s)',
      }),
      fleet.start({
        databaseUrl: url,
        channelDelayMs: 2_000,
        env: { IDEM_WAIT: '500ms' },
        name: 'impatient (IDEM_WAIT=500ms)',
      }),
    ]);
    [slow, successor, doomed, waiting, impatient] = started as [
      ExampleServer,
      ExampleServer,
      ExampleServer,
      ExampleServer,
      ExampleServer,
    ];
    servers.push(...started);
  }, 120_000);

  afterAll(async () => {
    await fleet.killAll();
    await database?.close();
  });

  it.skipIf(!available)(
    'E6: a handler running ten leases long, retried every half lease at two processes, runs once: every retry 409, then the replay',
    async () => {
      const key = `slow-${randomUUID()}`;
      const first = call(slow, trpcPayments, key);
      await slow.waitForEvent((event) => event.type === 'claimed' && event.key === key);
      let settled = false;
      void first.finally(() => (settled = true));
      // Retries every half lease, at both processes, for as long as the first one runs. The
      // outcome is stored before the first answer reaches this client, so a retry sent in
      // between is answered with the replay (E2) before \`settled\` flips: it ends the run.
      const retries: Answer[] = [];
      for (let i = 0; i < 40 && !settled; i++) {
        await sleep(LEASE_MS / 2);
        const retry = await call(i % 2 ? slow : successor, trpcPayments, key);
        if (!settled) retries.push(retry);
        if (retry.status !== 409) break;
      }
      const answer = await first;
      expect(answer.status, answer.text).toBe(200);
      const last = retries.at(-1);
      if (last && last.status !== 409) {
        expect(last).toMatchObject({ status: 200, replayed: true });
        expect(trpcPayments.payment(last)).toEqual(trpcPayments.payment(answer));
        retries.pop();
      }
      // Ten leases long: well past the lease many times over, and every retry meanwhile a 409.
      expect(retries.length).toBeGreaterThanOrEqual(8);
      expect(retries.map((retry) => retry.status)).toEqual(retries.map(() => 409));
      const replay = await call(successor, trpcPayments, key);
      expect(replay).toMatchObject({ status: 200, replayed: true });
      expect(trpcPayments.payment(replay)).toEqual(trpcPayments.payment(answer));
      expect(executions(key)).toBe(1);
      for (const server of servers) if (!server.exited) await server.settled();
      const types = servers.flatMap((server) => server.events.filter((e) => e.key === key).map((e) => e.type));
      expect(types).not.toContain('staleTakeover');
      expect(types).not.toContain('fenced');
    },
    60_000,
  );

  it.skipIf(!available)(
    'E6: an owner SIGKILLed mid-handler is taken over by another process within the lease and one renewal interval, and the takeover is reported',
    async () => {
      const key = `killed-${randomUUID()}`;
      const inFlight = call(doomed, restPayments, key).catch(() => undefined);
      await doomed.waitForEvent((event) => event.type === 'claimed' && event.key === key);
      await sleep(1_200); // past the first lease: only renewals kept it
      await doomed.kill('SIGKILL');
      const killedAt = Date.now();
      await inFlight;
      let final: Answer | undefined;
      for (let i = 0; i < 100 && !final; i++) {
        const answer = await call(successor, restPayments, key);
        if (answer.status !== 409) final = answer;
        else await sleep(100);
      }
      const tookMs = Date.now() - killedAt;
      console.info(`[reliability] lease: SIGKILLed owner taken over ${tookMs} ms after the kill (lease 1s)`);
      expect(final?.status, final?.text).toBe(201);
      // lease (1000) + one renewal interval (333) + the retry interval and a loaded machine's slack.
      expect(tookMs).toBeLessThan(1_000 + 333 + 1_000);
      expect(await successor.waitForEvent((e) => e.type === 'staleTakeover' && e.key === key)).toMatchObject({
        takeovers: 1,
      });
      expect(executions(key)).toBe(2);
    },
    60_000,
  );

  it.skipIf(!available)(
    "E6: an owner whose event loop stalls past its lease (SIGSTOP) is taken over; once it runs again its handler's signal aborts (leaseLost) and its completion is fenced",
    async () => {
      const key = `stalled-${randomUUID()}`;
      const first = call(slow, graphqlPayments, key);
      await slow.waitForEvent((event) => event.type === 'claimed' && event.key === key);
      process.kill(slow.pid, 'SIGSTOP');
      try {
        let final: Answer | undefined;
        for (let i = 0; i < 100 && !final; i++) {
          const answer = await call(successor, graphqlPayments, key);
          if (answer.status !== 409) final = answer;
          else await sleep(100);
        }
        expect(final?.status, final?.text).toBe(200);
        expect(final?.body?.errors).toBeUndefined();
      } finally {
        process.kill(slow.pid, 'SIGCONT');
      }
      expect(await slow.waitForEvent((e) => e.type === 'leaseLost' && e.key === key, 20_000)).toMatchObject({
        reason: 'fenced',
      });
      await slow.waitForEvent((e) => e.type === 'fenced' && e.key === key, 20_000);
      await first;
      // The stalled owner's charge was stopped by its signal: the ledger has the successor's only.
      const replay = await call(successor, graphqlPayments, key);
      expect(replay).toMatchObject({ status: 200, replayed: true });
      expect(executions(key)).toBe(2);
    },
    60_000,
  );

  /** A1 over HTTP: the key's status document (`GET /idempotency/keys`), as the caller's account reads it. */
  const keyStatus = async (server: ExampleServer, operation: string, key: string, account = 'acct_lease') => {
    const url = `${server.url}/idempotency/keys?${new URLSearchParams({ key, operation })}`;
    const response = await fetch(url, { headers: { authorization: `Bearer ${account}` } });
    expect(response.status).toBe(200);
    return (await response.json()) as { generations: Array<{ generation: number; state: string; waits: number }> };
  };
  const operations = new Map<PaymentEndpoint, string>([
    [trpcPayments, 'payments.create'],
    [graphqlPayments, 'mutation:createPayment'],
    [restPayments, 'POST /v1/payments'],
  ]);

  it.skipIf(!available)(
    "E3w/A1: with IDEM_WAIT longer than the handler, duplicates on tRPC, GraphQL and HTTP get the replay, never a 409; the handler runs once; the key's timeline counts the two waits",
    async () => {
      for (const endpoint of [trpcPayments, graphqlPayments, restPayments]) {
        const key = `wait-${randomUUID()}`;
        const first = call(waiting, endpoint, key);
        await waiting.waitForEvent((event) => event.type === 'claimed' && event.key === key);
        const duplicates = await Promise.all([call(waiting, endpoint, key), call(waiting, endpoint, key)]);
        const answer = await first;
        expect(answer.status, answer.text).toBe(endpoint.created);
        for (const duplicate of duplicates) {
          expect(duplicate.status, duplicate.text).toBe(endpoint.created);
          expect(duplicate.replayed).toBe(true);
          expect(endpoint.payment(duplicate)).toEqual(endpoint.payment(answer));
        }
        expect(executions(key)).toBe(1);
        await waiting.settled();
        expect(waiting.events.filter((e) => e.type === 'waited' && e.key === key)).toHaveLength(2);
        expect((await keyStatus(waiting, operations.get(endpoint)!, key)).generations).toEqual([
          expect.objectContaining({ generation: 1, state: 'completed', waits: 2 }),
        ]);
      }
    },
    60_000,
  );

  it.skipIf(!available)(
    'E3w: with IDEM_WAIT shorter than the handler, a duplicate gets 409 after the wait',
    async () => {
      const key = `impatient-${randomUUID()}`;
      const first = call(impatient, restPayments, key);
      await impatient.waitForEvent((event) => event.type === 'claimed' && event.key === key);
      const start = Date.now();
      const duplicate = await call(impatient, restPayments, key);
      const waitedMs = Date.now() - start;
      expect(duplicate.status, duplicate.text).toBe(409);
      expect(duplicate.retryAfter).toMatch(/^[1-9]\d*$/);
      expect(waitedMs).toBeGreaterThanOrEqual(480);
      expect((await first).status).toBe(201);
      expect(executions(key)).toBe(1);
    },
  );

  it.skipIf(!available)(
    'E3w: 500 concurrent waiters on one key with a pool of 10 are all answered with the replay, and the handler is not slowed',
    async () => {
      const key = `crowd-${randomUUID()}`;
      const first = call(waiting, restPayments, key);
      await waiting.waitForEvent((event) => event.type === 'claimed' && event.key === key);
      const answers = await Promise.all(Array.from({ length: 500 }, () => call(waiting, restPayments, key)));
      const answer = await first;
      expect(answer.status).toBe(201);
      const statuses = new Map<number, number>();
      for (const { status } of answers) statuses.set(status, (statuses.get(status) ?? 0) + 1);
      expect(Object.fromEntries(statuses)).toEqual({ 201: 500 });
      expect(answers.every((each) => each.replayed)).toBe(true);
      expect(executions(key)).toBe(1);
      // A1: every waiter counted exactly once, through group commit's `waits + n`; a count the
      // store refused (SQLite busy under this crowd) is reported as a storeError, never lost silently.
      await waiting.settled();
      const waited = waiting.events.filter((e) => e.type === 'waited' && e.key === key).length;
      const refused = waiting.events.filter(
        (e) => e.type === 'storeError' && e.key === key && 'storeOperation' in e && e.storeOperation === 'countWait',
      ).length;
      expect(waited).toBeGreaterThan(0);
      expect((await keyStatus(waiting, 'POST /v1/payments', key)).generations).toEqual([
        expect.objectContaining({ generation: 1, waits: waited - refused }),
      ]);
      const completed = await waiting.waitForEvent((e) => e.type === 'completed' && e.key === key, 15_000);
      // The channel sleeps 1.5 s; the handler's own time stays near it with 500 waiters polling.
      expect(completed.durationMs as number).toBeLessThan(1_500 + 1_000);
    },
    60_000,
  );
});
