/**
 * Scenario 1, races across processes (E1, E2, E3): four payments servers (OS processes) on one
 * store, 50 concurrent requests each with one key and one payload. The channel takes 300 ms,
 * so the requests overlap the first execution: exactly one of 200 executes, every other one
 * is a 409 with Retry-After or a replay, and the shared ledger holds one charge. Once the race
 * is over, every process replays what the executing request was told.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExampleFleet, type ExampleServer } from './support/example-server.ts';
import { SHARED_DATABASES, type SharedDatabase } from './support/databases.ts';
import { graphqlPayments, ledger, restPayments, trpcPayments, type PaymentEndpoint } from './support/payments.ts';
import type { Answer } from './support/http.ts';

const SERVERS = 4;
const REQUESTS_PER_SERVER = 50;
const CHANNEL_DELAY_MS = 300;

interface RaceTally {
  executed: Answer[];
  replayed: Answer[];
  conflicts: Answer[];
  other: Answer[];
  /** Answers of status 500 or more. */
  serverErrors: number;
  conflictsWithoutRetryAfter: number;
  perServer: Array<{ executed: number; replayed: number; conflicts: number }>;
  elapsedMs: number;
}

/** Fires every request at once (each server gets its share) and sorts the answers. */
async function race(
  servers: readonly ExampleServer[],
  endpoint: PaymentEndpoint,
  call: Parameters<PaymentEndpoint['create']>[2],
): Promise<RaceTally> {
  const started = Date.now();
  const answers = await Promise.all(
    servers.map((server) =>
      Promise.all(
        Array.from({ length: REQUESTS_PER_SERVER }, () =>
          endpoint.create(server.url, { amount: 4200, currency: 'EUR' }, call),
        ),
      ),
    ),
  );
  const tally: RaceTally = {
    executed: [],
    replayed: [],
    conflicts: [],
    other: [],
    serverErrors: 0,
    conflictsWithoutRetryAfter: 0,
    perServer: [],
    elapsedMs: Date.now() - started,
  };
  for (const serverAnswers of answers) {
    const mine = { executed: 0, replayed: 0, conflicts: 0 };
    for (const answer of serverAnswers) {
      if (answer.status >= 500) tally.serverErrors++;
      if (answer.status === endpoint.created && !answer.replayed) {
        tally.executed.push(answer);
        mine.executed++;
      } else if (answer.status === endpoint.created) {
        tally.replayed.push(answer);
        mine.replayed++;
      } else if (answer.status === 409) {
        tally.conflicts.push(answer);
        mine.conflicts++;
        if (answer.retryAfter === null) tally.conflictsWithoutRetryAfter++;
      } else tally.other.push(answer);
    }
    tally.perServer.push(mine);
  }
  return tally;
}

describe.each(SHARED_DATABASES)(
  'E1 across $label: 4 processes × 50 concurrent requests, one key',
  ({ label, available, open }) => {
    const fleet = new ExampleFleet();
    let database: SharedDatabase;
    const servers: ExampleServer[] = [];

    beforeAll(async () => {
      if (!available) return;
      database = await open();
      const options = { databaseUrl: database.url, channelDelayMs: CHANNEL_DELAY_MS };
      // All at once on a fresh database: their migrations race, and every one must start.
      servers.push(
        ...(await Promise.all(
          Array.from({ length: SERVERS }, (_, i) => fleet.start({ ...options, name: `payments#${i + 1}` })),
        )),
      );
      // Warm every process up (modules, JIT, database connections) so that the race is between requests, not cold starts.
      await Promise.all(servers.map((server) => ledger(server.url)));
    }, 180_000);

    afterAll(async () => {
      await fleet.killAll();
      await database?.close();
    });

    const cases: Array<{ endpoint: PaymentEndpoint; keyIn: 'header' | 'input'; title: string }> = [
      { endpoint: trpcPayments, keyIn: 'header', title: 'tRPC, Idempotency-Key header' },
      { endpoint: graphqlPayments, keyIn: 'input', title: 'GraphQL, idempotencyKey argument' },
      { endpoint: restPayments, keyIn: 'header', title: 'HTTP POST /v1/payments, Idempotency-Key header' },
    ];

    it.skipIf(!available).each(cases)(
      'E1/E2/E3 ($title): one execution and one ledger charge out of 200 requests, 0 answers ≥ 500, the rest 409 + Retry-After or replays; afterwards every process replays the executed payment',
      async ({ endpoint, keyIn }) => {
        const key = `race-${randomUUID()}`;
        const before = await ledger(servers[0]!.url);
        const tally = await race(servers, endpoint, { key, keyIn, account: 'acct_race' });

        const report = {
          database: label,
          endpoint: endpoint.name,
          executed: tally.executed.length,
          replayed: tally.replayed.length,
          conflicts: tally.conflicts.length,
          other: tally.other.map((answer) => `${answer.status} ${answer.text.slice(0, 120)}`),
          perServer: tally.perServer,
          elapsedMs: tally.elapsedMs,
        };
        console.info(`[reliability] race ${JSON.stringify(report)}`);

        expect(tally.serverErrors, 'answers ≥ 500').toBe(0);
        expect(tally.other, 'answers other than the executed status or 409').toEqual([]);
        expect(tally.executed).toHaveLength(1);
        expect(tally.executed.length + tally.replayed.length + tally.conflicts.length).toBe(
          SERVERS * REQUESTS_PER_SERVER,
        );
        expect(tally.conflictsWithoutRetryAfter, '409s without Retry-After').toBe(0);
        // The race only means something if requests overlapped the one execution, on other processes too.
        expect(
          tally.perServer.filter((server) => server.executed === 0 && server.conflicts > 0).length,
          'other processes that answered 409',
        ).toBeGreaterThan(0);

        // Every replay carries the payment the executing request was told, on whichever process
        // served it (E2): those of the race, if any, and one from each process once it is over.
        const executed = endpoint.payment(tally.executed[0]!)!;
        const afterwards = await Promise.all(
          servers.map((server) =>
            endpoint.create(server.url, { amount: 4200, currency: 'EUR' }, { key, keyIn, account: 'acct_race' }),
          ),
        );
        expect(afterwards.map((answer) => [answer.status, answer.replayed])).toEqual(
          Array(SERVERS).fill([endpoint.created, true]),
        );
        for (const replay of [...tally.replayed, ...afterwards]) expect(endpoint.payment(replay)).toEqual(executed);

        const after = await ledger(servers[0]!.url);
        expect(after.slice(before.length)).toEqual([{ id: executed.id, amount: 4200, currency: 'EUR' }]);

        const record = await database.store.get(endpoint.scope('acct_race', keyIn), key);
        expect(record).toMatchObject({
          state: 'completed',
          generation: 1,
          takeovers: 0,
          outcome: { status: endpoint.created },
        });
      },
      60_000,
    );
  },
);
