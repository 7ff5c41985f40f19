/**
 * Scenario 3, a crash mid-handler (E6): the payments server is SIGKILLed while the channel
 * call of three requests (tRPC header key, GraphQL argument key, HTTP header key) is still sleeping, before it
 * charged. Another process on the same database answers retries 409 with Retry-After while the
 * dead owner's lease lasts, then takes the claim over (new fencing token, `staleTakeover`
 * event, timeline `takeovers: 1`) and executes once: one ledger charge per key. That process is
 * started before the kill: how long a start takes on a loaded machine must not race the lease.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExampleFleet, type ExampleServer } from './support/example-server.ts';
import { SHARED_DATABASES, type SharedDatabase } from './support/databases.ts';
import { graphqlPayments, ledger, restPayments, trpcPayments, type PaymentEndpoint } from './support/payments.ts';
import { sleep, type Answer } from './support/http.ts';

/** The dead owner's lease: the retries between the kill and its end get 409. */
const LEASE = '8s';
const RETRY_INTERVAL_MS = 250;
/** Store and test share the machine's clock; this absorbs the millisecond rounding of timestamps. */
const CLOCK_SLACK_MS = 50;

interface Retried {
  conflicts: Array<{ at: number; retryAfter: string | null }>;
  final: Answer;
  /** When the final answer arrived. */
  finalAt: number;
}

/** Retries every 250 ms until the answer is not a 409: at most 60 attempts, 15 s. */
async function retryUntilNotConflict(call: () => Promise<Answer>): Promise<Retried> {
  const conflicts: Retried['conflicts'] = [];
  const deadline = Date.now() + 15_000;
  for (let attempt = 0; attempt < 60 && Date.now() < deadline; attempt++) {
    const at = Date.now();
    const answer = await call();
    if (answer.status !== 409) return { conflicts, final: answer, finalAt: Date.now() };
    conflicts.push({ at, retryAfter: answer.retryAfter });
    await sleep(RETRY_INTERVAL_MS);
  }
  throw new Error('[reliability] still 409 after 15 s');
}

describe.each(SHARED_DATABASES)(
  'E6 on $label: SIGKILL mid-handler, retry at another process',
  ({ label, available, open }) => {
    const fleet = new ExampleFleet();
    let database: SharedDatabase;

    beforeAll(async () => {
      if (available) database = await open();
    });

    afterAll(async () => {
      await fleet.killAll();
      await database?.close();
    });

    it.skipIf(!available)(
      `E6: after a SIGKILL mid-handler, retries at another process get 409 + Retry-After until the ${LEASE} lease the store recorded passes, then one takeover executes (staleTakeover, takeovers 1) and the ledger holds one charge per key`,
      async () => {
        const account = 'acct_crash';
        const input = { amount: 700, currency: 'EUR' };
        const cases: Array<{ endpoint: PaymentEndpoint; keyIn: 'header' | 'input'; key: string }> = [
          { endpoint: trpcPayments, keyIn: 'header', key: `crash-trpc-${randomUUID()}` },
          { endpoint: graphqlPayments, keyIn: 'input', key: `crash-gql-${randomUUID()}` },
          { endpoint: restPayments, keyIn: 'header', key: `crash-http-${randomUUID()}` },
        ];
        const call = (server: ExampleServer, { endpoint, keyIn, key }: (typeof cases)[number]) =>
          endpoint.create(server.url, input, { key, keyIn, account });

        const [doomed, successor] = await Promise.all([
          fleet.start({
            databaseUrl: database.url,
            lease: LEASE,
            channelDelayMs: 5000,
            name: 'payments (to be killed)',
          }),
          fleet.start({ databaseUrl: database.url, lease: LEASE, channelDelayMs: 100, name: 'payments (successor)' }),
        ]);
        const inFlight = cases.map((c) =>
          call(doomed, c).then(
            (answer) => `answered ${answer.status}`,
            (error: unknown) =>
              `failed: ${error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : String(error)}`,
          ),
        );
        for (const { key } of cases)
          await doomed.waitForEvent((event) => event.type === 'claimed' && event.key === key);
        await doomed.kill('SIGKILL');
        const killedAt = Date.now();
        // The clients of the dead process never got an answer.
        expect((await Promise.all(inFlight)).every((outcome) => outcome.startsWith('failed'))).toBe(true);

        const claims = await Promise.all(
          cases.map(({ endpoint, keyIn, key }) => database.store.get(endpoint.scope(account, keyIn), key)),
        );
        for (const claim of claims) expect(claim).toMatchObject({ state: 'processing', generation: 1, takeovers: 0 });

        const leaseUntil = claims.map((claim) => claim!.leaseUntil.getTime());

        const retried = await Promise.all(cases.map((c) => retryUntilNotConflict(() => call(successor, c))));

        const report = cases.map(({ endpoint }, i) => ({
          database: label,
          endpoint: endpoint.name,
          conflicts: retried[i]!.conflicts.length,
          retryAfter: [...new Set(retried[i]!.conflicts.map((conflict) => conflict.retryAfter))],
          firstSuccessAfterLeaseMs: retried[i]!.finalAt - leaseUntil[i]!,
          firstRetryAfterKillMs: (retried[i]!.conflicts[0]?.at ?? retried[i]!.finalAt) - killedAt,
        }));
        console.info(`[reliability] crash ${JSON.stringify(report)}`);

        const payments = [];
        for (const [i, { endpoint, keyIn, key }] of cases.entries()) {
          const { conflicts, final, finalAt } = retried[i]!;
          expect(conflicts.length, `${endpoint.name}: 409s while the lease lasted`).toBeGreaterThan(0);
          for (const conflict of conflicts) {
            expect(conflict.retryAfter).toMatch(/^[1-9]\d*$/);
            expect(conflict.at).toBeLessThan(leaseUntil[i]! + CLOCK_SLACK_MS);
          }
          expect(final.status, final.text).toBe(endpoint.created);
          expect(final.replayed).toBe(false);
          expect(finalAt).toBeGreaterThanOrEqual(leaseUntil[i]! - CLOCK_SLACK_MS);

          const takeover = await successor.waitForEvent((event) => event.type === 'staleTakeover' && event.key === key);
          expect(takeover).toMatchObject({ scope: endpoint.scope(account, keyIn), generation: 1, takeovers: 1 });
          expect(await database.store.timeline(endpoint.scope(account, keyIn), key)).toEqual([
            expect.objectContaining({
              generation: 1,
              state: 'completed',
              status: endpoint.created,
              outcomeKind: 'success',
              takeovers: 1,
            }),
          ]);

          const replay = await call(successor, cases[i]!);
          expect(replay.status).toBe(endpoint.created);
          expect(replay.replayed).toBe(true);
          expect(endpoint.payment(replay)).toEqual(endpoint.payment(final));
          payments.push(endpoint.payment(final)!);
        }

        // The killed process never reached the channel's insert: one charge per key, the takeover's.
        // (The two takeovers ran concurrently: compare without their order.)
        const byId = (a: { id: string }, b: { id: string }) => a.id.localeCompare(b.id);
        expect((await ledger(successor.url)).sort(byId)).toEqual(
          payments.map(({ id }) => ({ id, amount: 700, currency: 'EUR' })).sort(byId),
        );
      },
      180_000,
    );
  },
);
