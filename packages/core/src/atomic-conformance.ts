/**
 * The conformance suite's section on atomic mode (`AtomicMode`, the store's `transaction`), run by
 * `runStoreConformance` on every store: on a store that offers atomic mode, through the engine
 * against the real backend, with an application row the handler writes through `claim.tx`; on a
 * store without it, that the engine refuses it before anything runs.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createEngine } from './engine.js';
import { RequestInProgressError, StoreUnavailableError } from './errors.js';
import type { IdempotencyEvent, KeyedIdempotencyEvent } from './events.js';
import { notStartedAnswer } from './not-started.js';
import type { ClaimRequest, ClaimResult, IdempotencyStore, StoreTransaction } from './store.js';

/** How the suite writes through a store's transaction and sees what committed: an application table of the test's. */
export interface AtomicConformance<TTx = unknown> {
  /** Writes the application row `id` through `tx`, the transaction a handler is given (`claim.tx`). */
  write(tx: TTx, id: string): Promise<void>;
  /** Whether the row `id` is committed, read outside any transaction. */
  committed(id: string): Promise<boolean>;
}

interface AtomicSection<TTx> {
  store: () => IdempotencyStore<TTx>;
  scope: string;
  atomic: AtomicConformance<TTx> | undefined;
  request: (overrides?: Partial<ClaimRequest>) => ClaimRequest;
  /** Waits until the store's clock is past `instant`. */
  storePassed: (instant: Date) => Promise<void>;
  shortMs: number;
}

export function describeAtomicMode<TTx>({ store, scope, atomic, request, storePassed, shortMs }: AtomicSection<TTx>) {
  describe('atomic mode', () => {
    if (!atomic) {
      it('has none (no `transaction`): executeAtomic is refused with a TypeError before anything runs', async () => {
        expect(store().transaction, 'a store with atomic mode passes `atomic` to the suite').toBeUndefined();
        const key = randomUUID();
        let runs = 0;
        await expect(
          createEngine({ store: store() }).executeAtomic({ scope, key, fingerprint: null }, () => runs++),
        ).rejects.toBeInstanceOf(TypeError);
        expect(runs).toBe(0);
        expect(await store().get(scope, key)).toBeNull();
      });
      return;
    }
    const { write, committed } = atomic;

    /** Handler runs, counted by {@link writing}. */
    const runs = { count: 0 };
    /** A handler that writes the row `id` through its transaction, then returns or throws what `after` does. */
    const writing =
      (id: string, after: () => unknown = () => ({ id })) =>
      async ({ tx }: { tx: TTx }) => {
        runs.count++;
        await write(tx, id);
        return after();
      };
    const events = () => {
      const seen: KeyedIdempotencyEvent[] = [];
      return {
        seen,
        onEvent: (event: IdempotencyEvent) => void (event.type !== 'unkeyed' && seen.push(event)),
        types: () => seen.map((e) => e.type),
      };
    };
    /** The store, with its transaction's work changed by `around` (a fault the backend would cause). */
    const faulty = (
      around: <R>(work: (t: StoreTransaction<TTx>) => Promise<R>, t: StoreTransaction<TTx>) => Promise<R>,
    ): IdempotencyStore<TTx> => {
      const real = store();
      return {
        claim: (request) => real.claim(request),
        complete: (args) => real.complete(args),
        saveStep: (args) => real.saveStep(args),
        renew: (args) => real.renew(args),
        countWait: (args) => real.countWait(args),
        release: (args) => real.release(args),
        get: (scope, key) => real.get(scope, key),
        timeline: (scope, key) => real.timeline(scope, key),
        sweep: (options) => real.sweep(options),
        purge: (options) => real.purge(options),
        ping: () => real.ping(),
        transaction: (work) => real.transaction!((t) => around(work, t)),
      };
    };
    const fresh = () => ({ scope, key: randomUUID(), fingerprint: 'fp-atomic' });

    it('offers it: `transaction`', () => {
      expect(typeof store().transaction).toBe('function');
    });

    it("E1/E2: the handler's write commits with the claim and its outcome; a retry replays it without running the handler", async () => {
      const req = fresh();
      const recorded = events();
      const engine = createEngine({ store: store(), onEvent: recorded.onEvent });
      runs.count = 0;
      const first = await engine.executeAtomic(req, writing(req.key));
      expect(first).toEqual({ ok: true, value: { id: req.key }, replayed: false, generation: 1 });
      expect(await committed(req.key)).toBe(true);
      expect(await store().get(scope, req.key)).toMatchObject({
        state: 'completed',
        outcome: { kind: 'success', status: 200, body: JSON.stringify({ id: req.key }) },
      });
      const again = await engine.executeAtomic(req, writing(`${req.key}-again`));
      expect(again).toEqual({ ok: true, value: { id: req.key }, replayed: true, generation: 1 });
      expect(runs.count).toBe(1);
      expect(await committed(`${req.key}-again`)).toBe(false);
      expect(recorded.types()).toEqual(['claimed', 'completed', 'replayed']);
      // The execution's events name it (one requestId) and time its handler; the replay is another request.
      const [claimed, completed, replayed] = recorded.seen;
      expect(completed).toMatchObject({ requestId: claimed!.requestId, durationMs: expect.any(Number) });
      expect(replayed!.requestId).not.toBe(claimed!.requestId);
    });

    it('E4: a handler that throws has its write rolled back, and its error is stored and replayed', async () => {
      const req = fresh();
      const engine = createEngine({ store: store() });
      runs.count = 0;
      const declined = writing(req.key, () => {
        throw Object.assign(new Error('card declined'), { status: 402 });
      });
      const result = await engine.executeAtomic(req, declined);
      expect(result).toMatchObject({ ok: false, replayed: false, error: { message: 'card declined' } });
      expect(await committed(req.key)).toBe(false);
      expect(await store().get(scope, req.key)).toMatchObject({
        state: 'completed',
        outcome: { kind: 'error', status: 402 },
      });
      const replay = await engine.executeAtomic(req, declined);
      expect(replay).toMatchObject({ ok: false, replayed: true, error: { message: 'card declined', status: 402 } });
      expect(runs.count).toBe(1);
    });

    it('E4: a handler that did not start (it returns a notStartedAnswer) leaves nothing: its write rolled back, no record, its answer given back; a retry executes', async () => {
      const req = fresh();
      const engine = createEngine({ store: store() });
      const refused = writing(req.key, () => notStartedAnswer('rate limited'));
      expect(await engine.executeAtomic(req, refused)).toMatchObject({ notStarted: true, answer: 'rate limited' });
      expect(await committed(req.key)).toBe(false);
      expect(await store().get(scope, req.key)).toBeNull();
      expect(await engine.executeAtomic(req, writing(req.key))).toMatchObject({ ok: true, replayed: false });
      expect(await committed(req.key)).toBe(true);
    });

    it("E8: a step's writes commit with its stored result; a failure after it rolls back to that recovery point only, and is stored (replay)", async () => {
      const req = fresh();
      const engine = createEngine({ store: store() });
      runs.count = 0;
      const handler = async (claim: {
        tx: TTx;
        step: <T>(name: string, run: (stepKey: string) => Promise<T>) => Promise<T>;
      }) => {
        runs.count++;
        await claim.step('reserve', async () => {
          await write(claim.tx, `${req.key}-reserve`);
          return 'h_1';
        });
        await write(claim.tx, `${req.key}-after`);
        throw Object.assign(new Error('provider timeout'), { status: 503 });
      };
      expect(await engine.executeAtomic(req, handler)).toMatchObject({ ok: false, replayed: false });
      expect(await committed(`${req.key}-reserve`)).toBe(true);
      expect(await committed(`${req.key}-after`)).toBe(false);
      expect(await store().get(scope, req.key)).toMatchObject({
        state: 'completed',
        onFailure: 'replay',
        outcome: { kind: 'error', status: 503 },
        steps: [{ name: 'reserve', result: '"h_1"' }],
      });
      expect(await engine.executeAtomic(req, handler)).toMatchObject({ ok: false, replayed: true });
      expect(runs.count).toBe(1);
    });

    it('E8: onFailure resume in atomic mode: the failure leaves the key resumable with the step committed; the retry skips the step and completes, its writes committed', async () => {
      const req = fresh();
      const engine = createEngine({ store: store(), onFailure: 'resume' });
      let reserves = 0;
      let charges = 0;
      const handler = async (claim: {
        tx: TTx;
        step: <T>(name: string, run: (stepKey: string) => Promise<T>) => Promise<T>;
      }) => {
        await claim.step('reserve', async () => {
          reserves++;
          await write(claim.tx, `${req.key}-reserve`);
          return 'h_1';
        });
        return claim.step('charge', async () => {
          await write(claim.tx, `${req.key}-charge-${++charges}`);
          if (charges === 1) throw Object.assign(new Error('provider timeout'), { status: 503 });
          return 'ch_1';
        });
      };
      expect(await engine.executeAtomic(req, handler)).toMatchObject({ ok: false, replayed: false, resumable: true });
      expect(await committed(`${req.key}-reserve`)).toBe(true);
      expect(await committed(`${req.key}-charge-1`)).toBe(false);
      expect(await store().get(scope, req.key)).toMatchObject({ state: 'resumable', attempts: 1 });
      expect(await engine.executeAtomic(req, handler)).toEqual({
        ok: true,
        replayed: false,
        value: 'ch_1',
        generation: 1,
      });
      expect(await committed(`${req.key}-charge-2`)).toBe(true);
      expect(reserves).toBe(1);
      expect(await store().get(scope, req.key)).toMatchObject({
        state: 'completed',
        attempts: 2,
        steps: [
          { name: 'reserve', result: '"h_1"' },
          { name: 'charge', result: '"ch_1"' },
        ],
      });
    });

    it('E5: a transaction that fails to commit answers 503 and leaves nothing — no claim, no write, no outcome; a retry executes as generation 1', async () => {
      const req = fresh();
      const failingCommit = faulty(async (work, t) => {
        await work(t);
        // Where the backend's COMMIT would fail: the store must roll everything back.
        throw new Error('[conformance] the commit failed');
      });
      const recorded = events();
      await expect(
        createEngine({ store: failingCommit, onEvent: recorded.onEvent }).executeAtomic(req, writing(req.key)),
      ).rejects.toBeInstanceOf(StoreUnavailableError);
      expect(recorded.types()).toEqual(['storeError']);
      expect(await committed(req.key)).toBe(false);
      expect(await store().get(scope, req.key)).toBeNull();
      expect(await createEngine({ store: store() }).executeAtomic(req, writing(req.key))).toMatchObject({
        ok: true,
        replayed: false,
        generation: 1,
      });
      expect(await committed(req.key)).toBe(true);
    });

    it('a crash before the commit (the outcome never written) leaves nothing: the retry executes at once, without a lease to wait out', async () => {
      const req = fresh();
      const crashing = faulty((work, t) =>
        work({
          ...t,
          complete: async () => {
            throw new Error('[conformance] the connection was lost');
          },
        }),
      );
      runs.count = 0;
      await expect(
        createEngine({ store: crashing, lease: '1h' }).executeAtomic(req, writing(req.key)),
      ).rejects.toBeInstanceOf(StoreUnavailableError);
      expect(runs.count).toBe(1);
      expect(await committed(req.key)).toBe(false);
      expect(await store().get(scope, req.key)).toBeNull();
      const recorded = events();
      const retry = await createEngine({ store: store(), lease: '1h', onEvent: recorded.onEvent }).executeAtomic(
        req,
        writing(req.key),
      );
      expect(retry).toMatchObject({ ok: true, replayed: false, generation: 1 });
      expect(recorded.types()).toEqual(['claimed', 'completed']);
      expect(await store().get(scope, req.key)).toMatchObject({ state: 'completed', takeovers: 0 });
    });

    it('E1/E3: of 10 concurrent atomic executions of one key exactly one runs the handler; the others replay it or get 409', async () => {
      const req = fresh();
      const engine = createEngine({ store: store() });
      runs.count = 0;
      const results = await Promise.allSettled(
        Array.from({ length: 10 }, () => engine.executeAtomic(req, writing(req.key))),
      );
      expect(runs.count).toBe(1);
      expect(await committed(req.key)).toBe(true);
      const answers = results.map((result) =>
        result.status === 'fulfilled'
          ? result.value.replayed
            ? 'replayed'
            : 'executed'
          : result.reason instanceof RequestInProgressError
            ? '409'
            : String(result.reason),
      );
      expect(answers.filter((answer) => answer === 'executed')).toHaveLength(1);
      expect(answers.every((answer) => ['executed', 'replayed', '409'].includes(answer))).toBe(true);
    });

    it('E6: a claim whose owner died is taken over, and the handler runs once, in the transaction that completes it', async () => {
      const stale = request({ fingerprint: 'fp-atomic', leaseMs: shortMs });
      const taken: ClaimResult = await store().claim(stale);
      expect(taken.outcome).toBe('claimed');
      await storePassed(taken.record.leaseUntil);
      const recorded = events();
      runs.count = 0;
      const result = await createEngine({ store: store(), onEvent: recorded.onEvent }).executeAtomic(
        { scope, key: stale.key, fingerprint: 'fp-atomic' },
        writing(stale.key),
      );
      expect(result).toMatchObject({ ok: true, replayed: false, generation: 1 });
      expect(runs.count).toBe(1);
      expect(await committed(stale.key)).toBe(true);
      expect(recorded.types()).toEqual(['staleTakeover', 'claimed', 'completed']);
      expect(await store().get(scope, stale.key)).toMatchObject({ state: 'completed', takeovers: 1 });
    });
  });
}
