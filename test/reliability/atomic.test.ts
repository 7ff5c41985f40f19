/**
 * Scenario 7, atomic mode (issue 8): the payments example with `IDEM_ATOMIC=1` writes its
 * ledger row through `idempotencyClaim(ctx).tx`, in one PostgreSQL transaction with the claim
 * and the stored outcome. A crash anywhere leaves either nothing (the retry executes at once,
 * as if the key were new) or everything (the retry replays):
 *
 * - SIGKILL while the channel sleeps inside the transaction → nothing committed: no record, no
 *   ledger row; the restarted server executes the retry at once (no 409, no takeover).
 * - SIGKILL right after an answer → everything committed: the retry replays byte for byte.
 * - The connection cut under the open transaction, the `commit` cut before it reaches
 *   PostgreSQL, the `commit` delivered but its answer lost (TCP proxy, in-process app): 503 or
 *   the real answer, then the retry executes or replays; one ledger row per key either way.
 * - A non-atomic server killed mid-handler leaves a committed claim; the atomic server (running
 *   already, so that its start-up does not race the lease) answers 409 inside the lease the
 *   store recorded and takes the claim over after it (a transaction that locks it): one ledger row.
 *
 * `claimed` is emitted after the commit in atomic mode, so the tests see the open claim in
 * PostgreSQL instead: a backend holding `RowExclusiveLock` on the schema's `idem_keys` while the
 * record is still invisible to other connections.
 *
 * Needs a PostgreSQL server (child processes, a proxy): skipped on PGlite.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type SQL } from 'drizzle-orm';
import { openDatabase, type OpenedDatabase } from '@idem/drizzle/connect';
import type { IdempotencyEvent } from '@idem/core';
import { createPaymentsApp, type PaymentsApp } from '../../examples/payments/src/app.ts';
import { ExampleFleet, type ExampleServer } from './support/example-server.ts';
import { GROUP_COMMIT, POSTGRES_SCHEMA, postgresAddress, type SharedDatabase } from './support/databases.ts';
import { startTcpProxy, type TcpProxy } from './support/tcp-proxy.ts';
import { graphqlPayments, trpcPayments, type PaymentEndpoint } from './support/payments.ts';
import { pollUntil, sleep, type Answer } from './support/http.ts';
import { untilLeaseEnds } from '../support/waiting.ts';

/** Long: had the killed process committed its claim, every retry would get 409 for this long. */
const LONG_LEASE = '20s';
/** The killed non-atomic owner's lease: the first retry lands inside it, the takeover after it. */
const TAKEOVER_LEASE = '4s';
const INPUT = { amount: 700, currency: 'EUR' };
/** Drizzle's `commit` as node-postgres sends it: a simple Query message ('Q', length 11, the text, NUL). */
const COMMIT_ON_THE_WIRE = 'Q\0\0\0\x0bcommit\0';

type Pg = { execute(query: SQL): Promise<{ rows: Array<Record<string, unknown>> }> };

describe.skipIf(!POSTGRES_SCHEMA.available)(
  'atomic mode on PostgreSQL: a crash or a fault leaves nothing or everything',
  () => {
    const fleet = new ExampleFleet();
    let database: SharedDatabase;
    let pg: Pg;

    beforeAll(async () => {
      database = await POSTGRES_SCHEMA.open();
      pg = database.db as unknown as Pg;
    });

    afterAll(async () => {
      await fleet.killAll();
      await database?.close();
    });

    /** Ledger rows of one account (each case charges under an account of its own). */
    const ledgerOf = async (account: string) =>
      (
        await pg.execute(sql`SELECT id, amount, currency FROM payments_ledger WHERE account = ${account} ORDER BY seq`)
      ).rows.map((row) => ({ id: row.id, amount: Number(row.amount), currency: row.currency }));

    /** Backends other than ours holding a row lock on this schema's idem_keys: claims inside open transactions. */
    const openClaimTransactions = async () =>
      Number(
        (
          await pg.execute(sql`SELECT count(DISTINCT l.pid) AS n FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = current_schema() AND c.relname = 'idem_keys' AND l.mode = 'RowExclusiveLock' AND l.granted AND l.pid <> pg_backend_pid()`)
        ).rows[0]!.n,
      );

    const waitForOpenClaims = (count: number) =>
      pollUntil(async () => ((await openClaimTransactions()) >= count ? true : undefined), {
        intervalMs: 20,
        timeoutMs: 10_000,
      });

    interface Case {
      endpoint: PaymentEndpoint;
      key: string;
      account: string;
    }
    const casesFor = (label: string): Case[] =>
      [trpcPayments, graphqlPayments].map((endpoint) => ({
        endpoint,
        key: `atomic-${label}-${endpoint.name}-${randomUUID()}`,
        account: `acct_atomic_${label}_${endpoint.name.toLowerCase()}_${randomUUID().slice(0, 8)}`,
      }));
    const call = (server: ExampleServer, { endpoint, key, account }: Case) =>
      endpoint.create(server.url, INPUT, { key, account });
    const scopeOf = ({ endpoint, account }: Case) => endpoint.scope(account, 'header');
    const settle = (answer: Promise<Answer>) =>
      answer.then(
        (done) => `answered ${done.status}`,
        (error: unknown) => `failed: ${error instanceof Error ? error.message : String(error)}`,
      );
    const expectGraphQLReplayOf = (first: Answer, replay: Answer) =>
      expect(replay.text).toBe(`${first.text.slice(0, -1)},"extensions":{"idempotency":{"replayed":true}}}`);
    const expectReplayOf = ({ endpoint }: Case, first: Answer, replay: Answer) => {
      expect(replay.status).toBe(first.status);
      expect(replay.replayed).toBe(true);
      if (endpoint.name === 'tRPC') expect(replay.bytes.equals(first.bytes)).toBe(true);
      else expectGraphQLReplayOf(first, replay);
    };

    let survivor: ExampleServer | undefined;

    it('E1/E6 atomic: a SIGKILL while the handler runs inside the transaction leaves nothing — no record, no ledger row — and the restarted server executes the retry at once (no 409, no takeover: generation 1, takeovers 0), then replays', {
      timeout: 180_000,
    }, async () => {
      const cases = casesFor('crash');
      const doomed = await fleet.start({
        databaseUrl: database.url,
        atomic: true,
        lease: LONG_LEASE,
        channelDelayMs: 4000,
        name: 'payments atomic (to be killed)',
      });
      const startedAt = Date.now();
      const inFlight = cases.map((c) => settle(call(doomed, c)));
      await waitForOpenClaims(2);
      const claimsOpenAfterMs = Date.now() - startedAt;
      // Inside the open transaction: invisible to everyone else, nothing emitted yet.
      for (const c of cases) expect(await database.store.get(scopeOf(c), c.key)).toBeNull();
      await doomed.settled();
      expect(doomed.events.filter((event) => cases.some((c) => c.key === event.key))).toEqual([]);
      await doomed.kill('SIGKILL');
      expect((await Promise.all(inFlight)).every((outcome) => outcome.startsWith('failed'))).toBe(true);

      // PostgreSQL rolls the dead backends' transactions back: nothing of them remains.
      await pollUntil(async () => ((await openClaimTransactions()) === 0 ? true : undefined), {
        intervalMs: 20,
        timeoutMs: 10_000,
      });
      for (const c of cases) {
        expect(await database.store.get(scopeOf(c), c.key)).toBeNull();
        expect(await ledgerOf(c.account)).toEqual([]);
      }

      const restarted = await fleet.start({
        databaseUrl: database.url,
        atomic: true,
        lease: LONG_LEASE,
        channelDelayMs: 50,
        name: 'payments atomic (restarted)',
      });
      const retryStartedAt = Date.now();
      const firsts = await Promise.all(cases.map((c) => call(restarted, c)));
      const retryMs = Date.now() - retryStartedAt;
      const replays: Answer[] = [];
      for (const [i, c] of cases.entries()) {
        const first = firsts[i]!;
        expect(first.status, first.text).toBe(200);
        expect(first.replayed).toBe(false);
        const payment = c.endpoint.payment(first)!;
        expect(await ledgerOf(c.account)).toEqual([{ id: payment.id, amount: 700, currency: 'EUR' }]);
        expect(await database.store.timeline(scopeOf(c), c.key)).toEqual([
          expect.objectContaining({ generation: 1, state: 'completed', status: 200, takeovers: 0 }),
        ]);
        await restarted.settled();
        expect(restarted.events.filter((event) => event.key === c.key).map((event) => event.type)).toEqual([
          'claimed',
          'completed',
        ]);
        const replay = await call(restarted, c);
        expectReplayOf(c, first, replay);
        replays.push(replay);
        expect(await ledgerOf(c.account)).toHaveLength(1);
      }
      console.info(
        `[reliability] atomic crash mid-handler ${JSON.stringify(
          cases.map((c, i) => ({
            endpoint: c.endpoint.name,
            claimsOpenAfterMs,
            recordAfterKill: null,
            ledgerAfterKill: 0,
            retry: firsts[i]!.status,
            retryMs,
            conflicts: 0,
            takeovers: 0,
            ledger: 1,
            replay: replays[i]!.replayed,
          })),
        )}`,
      );
      survivor = restarted;
    });

    it('E2 atomic: a SIGKILL right after the answer leaves everything — the restarted server replays byte for byte, the ledger unchanged', {
      timeout: 150_000,
    }, async () => {
      const cases = casesFor('committed');
      const server =
        survivor ??
        (await fleet.start({ databaseUrl: database.url, atomic: true, lease: LONG_LEASE, name: 'payments atomic' }));
      const firsts = await Promise.all(cases.map((c) => call(server, c)));
      await server.kill('SIGKILL');
      for (const first of firsts) expect([first.status, first.replayed]).toEqual([200, false]);
      const ledgers = await Promise.all(cases.map((c) => ledgerOf(c.account)));

      const restarted = await fleet.start({
        databaseUrl: database.url,
        atomic: true,
        lease: LONG_LEASE,
        name: 'payments atomic (restarted after answers)',
      });
      for (const [i, c] of cases.entries()) {
        const replay = await call(restarted, c);
        expectReplayOf(c, firsts[i]!, replay);
        expect(await ledgerOf(c.account)).toEqual(ledgers[i]);
        expect(ledgers[i]).toEqual([{ id: c.endpoint.payment(firsts[i]!)!.id, amount: 700, currency: 'EUR' }]);
      }
      console.info(
        `[reliability] atomic crash after the answer: ${cases.length} keys replayed byte-identical after the restart, 1 ledger row each`,
      );
      await restarted.kill('SIGKILL');
    });

    it('E6 across modes: a non-atomic server killed mid-handler leaves a committed claim; the atomic server answers 409 while the lease the store recorded lasts, then takes it over (staleTakeover, takeovers 1, the claim locked in its transaction) and charges once', {
      timeout: 150_000,
    }, async () => {
      const cases = casesFor('takeover');
      const [doomed, atomic] = await Promise.all([
        fleet.start({
          databaseUrl: database.url,
          lease: TAKEOVER_LEASE,
          channelDelayMs: 5000,
          name: 'payments non-atomic (to be killed)',
        }),
        fleet.start({
          databaseUrl: database.url,
          atomic: true,
          lease: TAKEOVER_LEASE,
          channelDelayMs: 50,
          name: 'payments atomic (takes over)',
        }),
      ]);
      const inFlight = cases.map((c) => settle(call(doomed, c)));
      for (const c of cases) await doomed.waitForEvent((event) => event.type === 'claimed' && event.key === c.key);
      await doomed.kill('SIGKILL');
      await Promise.all(inFlight);
      for (const c of cases) {
        expect(await database.store.get(scopeOf(c), c.key)).toMatchObject({
          state: 'processing',
          generation: 1,
          takeovers: 0,
        });
        expect(await ledgerOf(c.account)).toEqual([]);
      }

      // Inside the dead owner's lease: 409, nothing executed.
      const conflicts = await Promise.all(cases.map((c) => call(atomic, c)));
      for (const [i, c] of cases.entries()) {
        expect([conflicts[i]!.status, problemCode(c, conflicts[i]!)], conflicts[i]!.text).toEqual([
          409,
          'idempotency_request_in_progress',
        ]);
        expect(conflicts[i]!.retryAfter).toMatch(/^[1-9]\d*$/);
        expect(await ledgerOf(c.account)).toEqual([]);
      }
      // Past it, by the lease the store recorded: the atomic server takes the claim over.
      for (const c of cases) await untilLeaseEnds(database.store, scopeOf(c), c.key);
      const answers = await Promise.all(cases.map((c) => call(atomic, c)));
      for (const [i, c] of cases.entries()) {
        const answer = answers[i]!;
        expect(answer.status, answer.text).toBe(200);
        expect(answer.replayed).toBe(false);
        expect(
          await atomic.waitForEvent((event) => event.type === 'staleTakeover' && event.key === c.key),
        ).toMatchObject({ generation: 1, takeovers: 1 });
        expect(await database.store.timeline(scopeOf(c), c.key)).toEqual([
          expect.objectContaining({ generation: 1, state: 'completed', status: 200, takeovers: 1 }),
        ]);
        expect(await ledgerOf(c.account)).toEqual([
          { id: c.endpoint.payment(answer)!.id, amount: 700, currency: 'EUR' },
        ]);
        expectReplayOf(c, answer, await call(atomic, c));
        expect(await ledgerOf(c.account)).toHaveLength(1);
      }
      console.info(
        `[reliability] atomic takeover of a non-atomic claim ${JSON.stringify(cases.map((c, i) => ({ endpoint: c.endpoint.name, insideLease: conflicts[i]!.status, afterLease: answers[i]!.status, takeovers: 1, ledger: 1 })))}`,
      );
      await atomic.kill('SIGKILL');
    });

    describe('faults between the atomic app and PostgreSQL (TCP proxy, in-process app)', () => {
      let proxy: TcpProxy;
      let opened: OpenedDatabase;
      let app: PaymentsApp;
      let url: string;
      const events: IdempotencyEvent[] = [];
      /** Uncaught exceptions while the faults happen: a dropped pooled connection must not produce one. */
      const uncaught: unknown[] = [];
      const onUncaught = (error: unknown) => void uncaught.push(error);

      beforeAll(async () => {
        proxy = await startTcpProxy(postgresAddress());
        opened = await openDatabase(proxy.urlFor(database.url), { connectionTimeoutMillis: 2000 });
        process.on('uncaughtException', onUncaught);
        app = createPaymentsApp({
          db: opened.db,
          groupCommit: GROUP_COMMIT,
          atomic: true,
          retentionMs: 3_600_000,
          leaseMs: 20_000,
          channelDelayMs: 1000,
          onEvent: (event) => void events.push(event),
        });
        await app.channel.migrate();
        await new Promise<void>((resolve) => app.server.listen(0, '127.0.0.1', resolve));
        url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
      });

      afterAll(async () => {
        process.off('uncaughtException', onUncaught);
        proxy?.passThrough();
        proxy?.clearDropRules();
        app?.server.closeAllConnections();
        await new Promise<void>((resolve) => (app ? app.server.close(() => resolve()) : resolve()));
        await app?.drain();
        await opened?.close();
        await proxy?.close();
        // openDatabase listens on every pooled connection: a connection that dropped while an
        // atomic transaction held it (handler running, or its commit) is not an uncaught exception.
        expect(uncaught).toEqual([]);
      });

      const create = ({ endpoint, key, account }: Case) => endpoint.create(url, INPUT, { key, account });

      /** After the fault: the same key until it is not a 409, then once more (a replay). One ledger row. */
      const retryAndCheck = async (c: Case) => {
        let answer = await create(c);
        for (let attempt = 0; answer.status === 409 && attempt < 20; attempt++) {
          await sleep(250);
          answer = await create(c);
        }
        expect(answer.status, answer.text).toBe(200);
        const replay = await create(c);
        expect(replay.replayed).toBe(true);
        const ledger = await ledgerOf(c.account);
        expect(ledger).toEqual([{ id: c.endpoint.payment(answer)!.id, amount: 700, currency: 'EUR' }]);
        return { retry: answer.replayed ? 'replayed' : 'executed', ledger: ledger.length };
      };

      it('E5/E7 atomic: the connection destroyed while the handler runs inside the transaction → the client gets an error (nothing committed: no record, no ledger row), the retry executes once', {
        timeout: 60_000,
      }, async () => {
        const report = [];
        for (const c of casesFor('cut')) {
          const pending = create(c);
          await waitForOpenClaims(1);
          const destroyed = proxy.destroyOpenSockets();
          expect(destroyed).toBeGreaterThan(0);
          const first = await pending;
          expect(first.status).toBeGreaterThanOrEqual(500);
          expect(first.replayed).toBe(false);
          expect(await database.store.get(scopeOf(c), c.key)).toBeNull();
          expect(await ledgerOf(c.account)).toEqual([]);
          const after = await retryAndCheck(c);
          expect(after.retry).toBe('executed');
          report.push({
            endpoint: c.endpoint.name,
            destroyed,
            first: first.status,
            problem: problemCode(c, first),
            ...after,
          });
        }
        console.info(
          `[reliability] atomic fault: connection cut mid-handler ${JSON.stringify(report)}; uncaught exceptions so far: ${uncaught.length}`,
        );
      });

      it('E5/E7 atomic: the commit cut before it reaches PostgreSQL → 503, nothing committed, the retry executes once', {
        timeout: 60_000,
      }, async () => {
        const report = [];
        for (const c of casesFor('end-dropped')) {
          proxy.dropWhenClientSends(COMMIT_ON_THE_WIRE);
          const first = await create(c);
          proxy.clearDropRules();
          expect(first.status, first.text).toBe(503);
          expect(await database.store.get(scopeOf(c), c.key)).toBeNull();
          expect(await ledgerOf(c.account)).toEqual([]);
          const after = await retryAndCheck(c);
          expect(after.retry).toBe('executed');
          report.push({ endpoint: c.endpoint.name, first: first.status, problem: problemCode(c, first), ...after });
        }
        console.info(
          `[reliability] atomic fault: commit dropped ${JSON.stringify(report)} (dropped ${proxy.stats.dropped})`,
        );
      });

      it('E5/E7 atomic: the commit delivered but its answer lost → 503 although everything committed, the retry replays; one ledger row', {
        timeout: 60_000,
      }, async () => {
        const report = [];
        for (const c of casesFor('end-lost')) {
          proxy.cutAfterClientSends(COMMIT_ON_THE_WIRE);
          const first = await create(c);
          proxy.clearDropRules();
          expect(first.status, first.text).toBe(503);
          const after = await retryAndCheck(c);
          expect(after.retry).toBe('replayed');
          report.push({ endpoint: c.endpoint.name, first: first.status, problem: problemCode(c, first), ...after });
        }
        console.info(
          `[reliability] atomic fault: commit answer lost ${JSON.stringify(report)} (cut ${proxy.stats.cutAfter}); uncaught exceptions in all: ${uncaught.length}`,
        );
      });
    });
  },
);

function problemCode({ endpoint }: { endpoint: PaymentEndpoint }, answer: Answer): string | undefined {
  return endpoint.name === 'tRPC'
    ? answer.body?.error?.data?.idempotency?.code
    : answer.body?.errors?.[0]?.extensions?.idempotency?.code;
}
