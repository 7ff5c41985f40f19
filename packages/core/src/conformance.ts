/**
 * The store conformance suite (in the style of Auth.js `runBasicTests`): call it from your
 * store's test file, under vitest, and every rule of the store contract is checked against
 * your real backend.
 *
 * ```ts
 * import { runStoreConformance } from '@idem/core/conformance';
 * runStoreConformance({ name: 'my store', createStore: async () => new MyStore(...) });
 * ```
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { describeKeyStatusConformance } from './conformance-status.js';
import { describeAtomicMode, type AtomicConformance } from './atomic-conformance.js';
import { describeLeaseConformance } from './conformance-lease.js';
import { describeStepsConformance } from './conformance-steps.js';
import { createEngine } from './engine.js';
import { FingerprintMismatchError, RequestInProgressError } from './errors.js';
import type { ClaimRequest, ClaimResult, IdempotencyStore } from './store.js';

export type { AtomicConformance } from './atomic-conformance.js';

export interface StoreConformanceOptions<TTx = unknown> {
  /** Shown in the describe block. */
  name: string;
  /** Returns a ready store (migrated, empty or not: every test uses fresh keys). */
  createStore: () => Promise<IdempotencyStore<TTx>>;
  /**
   * For a store with atomic mode (`transaction`): how a handler writes an application row through
   * the transaction it is given, and how the suite reads what committed. The atomic-mode section
   * then runs against it; without it, the suite checks that the store has no atomic mode.
   * Defaults to none.
   */
  atomic?: AtomicConformance<TTx>;
  /** Closes connections after the suite. */
  teardown?: () => Promise<void>;
  /**
   * The short lease and retention the suite waits out, in ms. It waits until the store's own
   * clock (the `now` of its answers) has passed the instants the store recorded. Defaults to 300.
   */
  shortMs?: number;
  /**
   * The store takes its time from this process's `Date`, as an in-process database does
   * (PGlite): the test that timestamps follow the store's clock and not the application's
   * cannot tell the two apart, and is skipped. Defaults to `false`.
   */
  sharesProcessClock?: boolean;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** How far the application's `Date` is moved back while the R1 test claims: a year. */
const APPLICATION_CLOCK_SHIFT_MS = 365 * 24 * 3_600_000;

export function runStoreConformance<TTx = unknown>({
  name,
  createStore,
  atomic,
  teardown,
  shortMs = 300,
  sharesProcessClock = false,
}: StoreConformanceOptions<TTx>): void {
  describe(`store conformance: ${name}`, () => {
    let store: IdempotencyStore<TTx>;
    const scope = `conformance/${randomUUID()}`;

    beforeAll(async () => {
      store = await createStore();
    });
    afterAll(async () => {
      await teardown?.();
    });

    const request = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => ({
      scope,
      key: randomUUID(),
      fingerprint: 'fp-1',
      token: randomUUID(),
      leaseMs: 30_000,
      retentionMs: 60_000,
      expiredReuse: 'execute',
      ...overrides,
    });
    const claimed = (result: ClaimResult) => {
      expect(result.outcome).toBe('claimed');
      if (result.outcome !== 'claimed') throw new Error('not claimed');
      return result;
    };
    const existing = (result: ClaimResult) => {
      expect(result.outcome).toBe('existing');
      if (result.outcome !== 'existing') throw new Error('not existing');
      return result;
    };
    const success = (body: string) => ({ kind: 'success' as const, status: 200, body });

    /** The store's clock, read through the contract: an `existing` answer carries the store's `now`. */
    const clockKey = randomUUID();
    const storeNow = async (): Promise<Date> => {
      const result = await store.claim(request({ key: clockKey, leaseMs: 3_600_000, retentionMs: 3_600_000 }));
      return result.outcome === 'existing' ? result.now : result.record.createdAt;
    };
    /** Waits until the store's clock is past `instant` (a lease or retention end it recorded). */
    const storePassed = async (instant: Date) => {
      for (let round = 0; round < 100; round++) {
        const left = instant.getTime() - (await storeNow()).getTime();
        if (left < 0) return;
        await sleep(left + 1);
      }
      throw new Error(`[idem] conformance: the store's clock did not pass ${instant.toISOString()}`);
    };
    /** The expiry the store holds for (scope, key) now: `complete` moves it (retention counts from completion). */
    const storedExpiry = async (key: string): Promise<Date> => {
      const record = await store.get(scope, key);
      if (!record) throw new Error(`[idem] conformance: no record of ${key}`);
      return record.expiresAt;
    };
    /** Waits until (scope, key) is claimed and its handler is running. */
    const untilProcessing = async (key: string) => {
      for (let round = 0; (await store.get(scope, key))?.state !== 'processing'; round++) {
        if (round === 1000) throw new Error('[idem] conformance: the first request never claimed its key');
        await sleep(5);
      }
    };

    it('E1: claims a new key as generation 1, processing, with the lease and retention it was given', async () => {
      const req = request({ leaseMs: 5_000, retentionMs: 3_600_000 });
      const { record } = claimed(await store.claim(req));
      expect(record).toMatchObject({
        scope,
        key: req.key,
        generation: 1,
        state: 'processing',
        token: req.token,
        fingerprint: 'fp-1',
        takeovers: 0,
        waits: 0,
        outcome: null,
        completedAt: null,
        archivedAt: null,
      });
      expect(record.leaseUntil.getTime() - record.createdAt.getTime()).toBeCloseTo(5_000, -2);
      expect(record.expiresAt.getTime() - record.createdAt.getTime()).toBeCloseTo(3_600_000, -2);
    });

    it.skipIf(sharesProcessClock)(
      "R1: a claim is stamped by the store's clock, not by the application's Date (moved back a year while it claims)",
      async () => {
        const req = request({ leaseMs: 5_000, retentionMs: 3_600_000 });
        const before = await storeNow();
        vi.setSystemTime(Date.now() - APPLICATION_CLOCK_SHIFT_MS);
        let result: ClaimResult;
        try {
          result = await store.claim(req);
        } finally {
          vi.useRealTimers();
        }
        const after = await storeNow();
        const { record } = claimed(result);
        // Stamped with the application's time, the claim would lie a year before `before`.
        expect(record.createdAt.getTime()).toBeGreaterThanOrEqual(before.getTime());
        expect(record.createdAt.getTime()).toBeLessThanOrEqual(after.getTime());
        expect(record.leaseUntil.getTime() - record.createdAt.getTime()).toBeCloseTo(5_000, -2);
        expect(record.expiresAt.getTime() - record.createdAt.getTime()).toBeCloseTo(3_600_000, -2);
      },
    );

    it('E1: exactly one of 25 concurrent claims of one key wins', async () => {
      const key = randomUUID();
      const results = await Promise.all(Array.from({ length: 25 }, () => store.claim(request({ key }))));
      expect(results.filter((r) => r.outcome === 'claimed')).toHaveLength(1);
      expect(results.filter((r) => r.outcome === 'existing')).toHaveLength(24);
    });

    it('S1: the same key in another scope is another record', async () => {
      const key = randomUUID();
      claimed(await store.claim(request({ key })));
      claimed(await store.claim(request({ key, scope: `${scope}/other` })));
    });

    it('E2: stores the outcome for the owner and answers existing with it, body byte-identical', async () => {
      const req = request();
      claimed(await store.claim(req));
      const body = '{"z":1,"a":{"é":"✓ 日本","b":[3,1,2]},"m":null}';
      expect(await store.complete({ scope, key: req.key, token: req.token, outcome: success(body) })).toBe(true);
      const again = existing(await store.claim(request({ key: req.key })));
      expect(again.expired).toBe(false);
      expect(again.record.state).toBe('completed');
      expect(again.record.outcome).toEqual({ kind: 'success', status: 200, body });
      expect(again.record.completedAt).toBeInstanceOf(Date);
      expect(again.now).toBeInstanceOf(Date);
      expect((await store.get(scope, req.key))?.outcome?.body).toBe(body);
    });

    it('E4: stores error outcomes with their status', async () => {
      const req = request();
      claimed(await store.claim(req));
      const outcome = { kind: 'error' as const, status: 500, body: '{"message":"boom"}' };
      expect(await store.complete({ scope, key: req.key, token: req.token, outcome })).toBe(true);
      expect((await store.get(scope, req.key))?.outcome).toEqual(outcome);
    });

    it('E6: refuses complete and release from a token that does not own the claim', async () => {
      const req = request();
      claimed(await store.claim(req));
      expect(await store.complete({ scope, key: req.key, token: randomUUID(), outcome: success('1') })).toBe(false);
      expect(await store.release({ scope, key: req.key, token: randomUUID() })).toBe(false);
      expect((await store.get(scope, req.key))?.state).toBe('processing');
    });

    it('E3: answers existing while the lease of a processing claim is live', async () => {
      const req = request();
      claimed(await store.claim(req));
      const other = existing(await store.claim(request({ key: req.key })));
      expect(other.record.state).toBe('processing');
      expect(other.record.token).toBe(req.token);
      expect(other.record.leaseUntil.getTime()).toBeGreaterThan(other.now.getTime());
    });

    it('rule 6: a request claiming again with its own token (its first answer lost) owns its claim as it is', async () => {
      const req = request();
      const first = claimed(await store.claim(req));
      const again = claimed(await store.claim(req));
      expect(again.record).toMatchObject({ token: req.token, state: 'processing', generation: 1, takeovers: 0 });
      expect(again.record.leaseUntil).toEqual(first.record.leaseUntil);
      expect(again.takeover).toBeUndefined();
      expect(again.expired).toBeUndefined();
      expect(await store.complete({ scope, key: req.key, token: req.token, outcome: success('"own"') })).toBe(true);
      // Completed, the record is no longer a claim: the same request now finds its outcome.
      expect(existing(await store.claim(req)).record.outcome?.body).toBe('"own"');
    });

    it('E4: a released claim is taken over as new, with the new fingerprint, in the same generation', async () => {
      const req = request();
      claimed(await store.claim(req));
      expect(await store.release({ scope, key: req.key, token: req.token })).toBe(true);
      expect((await store.get(scope, req.key))?.state).toBe('released');
      const next = claimed(await store.claim(request({ key: req.key, fingerprint: 'fp-2' })));
      expect(next.record).toMatchObject({ generation: 1, state: 'processing', fingerprint: 'fp-2' });
      expect(next.takeover).toBeUndefined();
      expect(next.expired).toBeUndefined();
    });

    it('E6: after the lease passes a matching request takes over with a new token; the stale owner is fenced out', async () => {
      const first = request({ leaseMs: shortMs });
      const { record } = claimed(await store.claim(first));
      await storePassed(record.leaseUntil);
      const second = request({ key: first.key });
      const takeover = claimed(await store.claim(second));
      expect(takeover.takeover?.previousToken).toBe(first.token);
      expect(takeover.record).toMatchObject({ token: second.token, takeovers: 1, generation: 1 });
      expect(await store.complete({ scope, key: first.key, token: first.token, outcome: success('"stale"') })).toBe(
        false,
      );
      expect(await store.complete({ scope, key: first.key, token: second.token, outcome: success('"fresh"') })).toBe(
        true,
      );
      expect((await store.get(scope, first.key))?.outcome?.body).toBe('"fresh"');
    });

    it('E6/F3: a stale claim is not taken over by a request with another fingerprint', async () => {
      const first = request({ leaseMs: shortMs });
      const { record } = claimed(await store.claim(first));
      await storePassed(record.leaseUntil);
      const other = existing(await store.claim(request({ key: first.key, fingerprint: 'fp-other' })));
      expect(other.record.token).toBe(first.token);
    });

    it('F2: a null fingerprint matches any for takeover', async () => {
      const first = request({ leaseMs: shortMs, fingerprint: null });
      const { record } = claimed(await store.claim(first));
      await storePassed(record.leaseUntil);
      claimed(await store.claim(request({ key: first.key, fingerprint: 'anything' })));
    });

    it('R2: past retention a reuse archives the earlier generation and claims generation 2', async () => {
      const first = request({ retentionMs: shortMs, leaseMs: shortMs });
      claimed(await store.claim(first));
      await store.complete({ scope, key: first.key, token: first.token, outcome: success('{"charge":1}') });
      await storePassed(await storedExpiry(first.key));
      const reuse = claimed(await store.claim(request({ key: first.key, fingerprint: 'fp-different' })));
      expect(reuse.record).toMatchObject({ generation: 2, state: 'processing', fingerprint: 'fp-different' });
      expect(reuse.expired).toMatchObject({ generation: 1, state: 'archived', fingerprint: 'fp-1' });
      expect(reuse.expired?.outcome?.status).toBe(200);
      expect(reuse.expired?.completedAt).toBeInstanceOf(Date);
      expect(reuse.expired?.archivedAt).toBeInstanceOf(Date);
      const timeline = await store.timeline(scope, first.key);
      expect(timeline.map((entry) => entry.generation)).toEqual([1, 2]);
      expect(timeline[0]).toMatchObject({
        state: 'archived',
        status: 200,
        outcomeKind: 'success',
        fingerprint: 'fp-1',
      });
      expect(timeline[0]?.reusedAt).toBeInstanceOf(Date);
      expect(timeline[1]).toMatchObject({ state: 'processing', status: null, reusedAt: null });
    });

    it('R2: exactly one of concurrent reuses of an expired key claims the next generation', async () => {
      const first = request({ retentionMs: shortMs, leaseMs: shortMs });
      claimed(await store.claim(first));
      await store.complete({ scope, key: first.key, token: first.token, outcome: success('1') });
      await storePassed(await storedExpiry(first.key));
      const results = await Promise.all(Array.from({ length: 10 }, () => store.claim(request({ key: first.key }))));
      expect(results.filter((r) => r.outcome === 'claimed')).toHaveLength(1);
      expect((await store.timeline(scope, first.key)).map((entry) => entry.generation)).toEqual([1, 2]);
    });

    it('R2: with expiredReuse reject, an expired key answers existing/expired and nothing changes', async () => {
      const first = request({ retentionMs: shortMs, leaseMs: shortMs });
      claimed(await store.claim(first));
      await store.complete({ scope, key: first.key, token: first.token, outcome: success('1') });
      await storePassed(await storedExpiry(first.key));
      const answer = existing(await store.claim(request({ key: first.key, expiredReuse: 'reject' })));
      expect(answer.expired).toBe(true);
      expect(answer.record.generation).toBe(1);
      expect(await store.timeline(scope, first.key)).toHaveLength(1);
    });

    it('R3: sweep archives expired records in batches, dropping bodies and keeping status and fingerprint', async () => {
      // Drain whatever earlier tests left expired, so counts below are ours.
      while ((await store.sweep({ batchSize: 1000 })).archived > 0);
      const records = await Promise.all(
        Array.from({ length: 3 }, async () => {
          const req = request({ retentionMs: shortMs, leaseMs: shortMs });
          const { record } = claimed(await store.claim(req));
          await store.complete({ scope, key: req.key, token: req.token, outcome: success('{"secret":true}') });
          return record;
        }),
      );
      const keys = records.map((record) => record.key);
      const live = request();
      claimed(await store.claim(live));
      const expiries = await Promise.all(keys.map((key) => storedExpiry(key)));
      await storePassed(new Date(Math.max(...expiries.map((expiry) => expiry.getTime()))));
      const first = await store.sweep({ batchSize: 2 });
      const second = await store.sweep({ batchSize: 2 });
      expect(first.archived).toBe(2);
      expect(first.archived + second.archived).toBeGreaterThanOrEqual(3);
      for (const key of keys) {
        const record = await store.get(scope, key);
        expect(record).toMatchObject({ state: 'archived', fingerprint: 'fp-1' });
        expect(record?.outcome).toEqual({ kind: 'success', status: 200, body: null });
        expect(record?.archivedAt).toBeInstanceOf(Date);
      }
      expect((await store.get(scope, live.key))?.state).toBe('processing');
      const reuse = claimed(await store.claim(request({ key: keys[0]! })));
      expect(reuse.record.generation).toBe(2);
      expect(reuse.expired?.outcome?.status).toBe(200);
    });

    it('R3: purge deletes only archived records older than the horizon', async () => {
      const req = request({ retentionMs: shortMs, leaseMs: shortMs });
      claimed(await store.claim(req));
      await store.complete({ scope, key: req.key, token: req.token, outcome: success('1') });
      await storePassed(await storedExpiry(req.key));
      claimed(await store.claim(request({ key: req.key })));
      expect((await store.purge({ olderThanMs: 3_600_000 })).deleted).toBe(0);
      const generations = await store.timeline(scope, req.key);
      expect(generations).toHaveLength(2);
      expect(generations[0]?.archivedAt).toBeInstanceOf(Date);
      await storePassed(new Date(generations[0]!.archivedAt!.getTime() + 1));
      const { deleted } = await store.purge({ olderThanMs: 1 });
      expect(deleted).toBeGreaterThanOrEqual(1);
      const timeline = await store.timeline(scope, req.key);
      expect(timeline.map((entry) => entry.generation)).toEqual([2]);
    });

    it('answers ping when reachable', async () => {
      await expect(store.ping()).resolves.toBeUndefined();
    });

    describeKeyStatusConformance({ store: () => store, shortMs, storePassed });
    describeLeaseConformance({ store: () => store as IdempotencyStore<unknown>, scope, request, storePassed, shortMs });
    describeStepsConformance({ store: () => store as IdempotencyStore<unknown>, scope, request, storePassed, shortMs });

    describe('through the engine', () => {
      const engine = () => createEngine({ store });

      it('E2: replays the stored result and does not run the handler again', async () => {
        const key = randomUUID();
        let calls = 0;
        const handler = async () => ({ id: ++calls, at: 'x' });
        const first = await engine().execute({ scope, key, fingerprint: 'a' }, handler);
        const second = await engine().execute({ scope, key, fingerprint: 'a' }, handler);
        expect(first).toMatchObject({ ok: true, replayed: false, value: { id: 1 } });
        expect(second).toMatchObject({ ok: true, replayed: true, value: { id: 1 } });
        expect(calls).toBe(1);
      });

      it('E3/F3: answers 409 while processing and 422 for another payload', async () => {
        const key = randomUUID();
        let release!: () => void;
        const gate = new Promise<void>((resolve) => (release = resolve));
        const running = engine().execute({ scope, key, fingerprint: 'a' }, () => gate.then(() => 'done'));
        await untilProcessing(key);
        await expect(engine().execute({ scope, key, fingerprint: 'a' }, () => 'x')).rejects.toBeInstanceOf(
          RequestInProgressError,
        );
        await expect(engine().execute({ scope, key, fingerprint: 'b' }, () => 'x')).rejects.toBeInstanceOf(
          FingerprintMismatchError,
        );
        release();
        expect(await running).toMatchObject({ ok: true, value: 'done' });
        await expect(engine().execute({ scope, key, fingerprint: 'b' }, () => 'x')).rejects.toBeInstanceOf(
          FingerprintMismatchError,
        );
      });
    });

    describeAtomicMode({ store: () => store, scope, atomic, request, storePassed, shortMs });

    describe('R1/E6: retention and lease', () => {
      it('R1: a processing claim inside its lease is not expired by a shorter retention: a retry answers existing, not a reuse', async () => {
        const first = request({ retentionMs: shortMs, leaseMs: 30_000 });
        const { record } = claimed(await store.claim(first));
        await storePassed(record.expiresAt);
        for (const expiredReuse of ['execute', 'reject'] as const) {
          const retry = existing(await store.claim(request({ key: first.key, expiredReuse })));
          expect(retry.expired).toBe(false);
          expect(retry.record).toMatchObject({ generation: 1, state: 'processing', token: first.token });
        }
        expect(await store.timeline(scope, first.key)).toHaveLength(1);
      });

      it('R1/R3: sweep leaves a processing claim inside its lease alone, however short its retention', async () => {
        const first = request({ retentionMs: shortMs, leaseMs: 30_000 });
        const { record } = claimed(await store.claim(first));
        await storePassed(record.expiresAt);
        while ((await store.sweep({ batchSize: 1000 })).archived > 0);
        expect(await store.get(scope, first.key)).toMatchObject({
          state: 'processing',
          token: first.token,
          archivedAt: null,
        });
      });

      it("R1: retention counts from completion: an outcome stored after the claim's retention would have ended is replayed, and expires one retention after completion", async () => {
        const first = request({ retentionMs: shortMs, leaseMs: 30_000 });
        const { record } = claimed(await store.claim(first));
        await storePassed(record.expiresAt);
        expect(
          await store.complete({ scope, key: first.key, token: first.token, outcome: success('{"charge":1}') }),
        ).toBe(true);
        const stored = await store.get(scope, first.key);
        expect(stored!.expiresAt.getTime() - stored!.completedAt!.getTime()).toBe(shortMs);
        const retry = existing(await store.claim(request({ key: first.key })));
        expect(retry.expired).toBe(false);
        expect(retry.record).toMatchObject({ state: 'completed', outcome: success('{"charge":1}') });
        await storePassed(stored!.expiresAt);
        const reuse = claimed(await store.claim(request({ key: first.key })));
        expect(reuse.record.generation).toBe(2);
        expect(reuse.expired).toMatchObject({ generation: 1, outcome: { status: 200 } });
      });

      it('R1/E3: through the engine, a retry while the handler runs past the retention gets 409, not a second execution; the first outcome is then replayed', async () => {
        const key = randomUUID();
        const events: string[] = [];
        const shortRetention = createEngine({
          store,
          retention: shortMs,
          lease: 30_000,
          onEvent: (event) => void events.push(event.type),
        });
        let release!: () => void;
        const gate = new Promise<void>((resolve) => (release = resolve));
        let retries = 0;
        const running = shortRetention.execute({ scope, key, fingerprint: 'a' }, () => gate.then(() => 'charged once'));
        await untilProcessing(key);
        await storePassed((await store.get(scope, key))!.expiresAt);
        const retry = () =>
          shortRetention.execute({ scope, key, fingerprint: 'a' }, () => `charged again (${++retries})`);
        await expect(retry()).rejects.toBeInstanceOf(RequestInProgressError);
        release();
        expect(await running).toMatchObject({ ok: true, value: 'charged once', replayed: false, generation: 1 });
        expect(await retry()).toMatchObject({ ok: true, value: 'charged once', replayed: true, generation: 1 });
        expect(retries).toBe(0);
        expect(events).not.toContain('expiredKeyReused');
        expect(events).not.toContain('fenced');
      });
    });
  });
}
