/**
 * The conformance cases of lease renewal (E6) and of a duplicate that waits (E3w, with its count
 * in the key's timeline, A1), run by `runStoreConformance` against the store under test.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createEngine } from './engine.js';
import { RequestInProgressError } from './errors.js';
import { LeaseLostError } from './lease.js';
import type { KeyedIdempotencyEvent } from './events.js';
import type { ClaimRequest, ClaimResult, IdempotencyStore } from './store.js';

export interface LeaseConformance {
  store: () => IdempotencyStore<unknown>;
  scope: string;
  request: (overrides?: Partial<ClaimRequest>) => ClaimRequest;
  storePassed: (instant: Date) => Promise<void>;
  shortMs: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function claimedRecord(result: ClaimResult) {
  if (result.outcome !== 'claimed') throw new Error(`[idem] conformance: expected a claim, got ${result.outcome}`);
  return result.record;
}

export function describeLeaseConformance({ store, scope, request, storePassed, shortMs }: LeaseConformance): void {
  const success = (body: string) => ({ kind: 'success' as const, status: 200, body });
  const owner = (req: ClaimRequest) => ({ scope, key: req.key, token: req.token });
  /** The record of (scope, key) once its first request claimed it and its handler runs. */
  const untilProcessing = async (key: string) => {
    for (let round = 0; round < 1000; round++) {
      const record = await store().get(scope, key);
      if (record?.state === 'processing') return record;
      await sleep(5);
    }
    throw new Error('[idem] conformance: the first request never claimed its key');
  };

  describe('E6: lease renewal', () => {
    it("E6: renew by the claim's owner moves its lease to now + the lease it asks for", async () => {
      const req = request({ leaseMs: shortMs });
      const before = claimedRecord(await store().claim(req));
      expect(await store().renew({ ...owner(req), leaseMs: 3_600_000 })).toBe(true);
      const after = await store().get(scope, req.key);
      expect(after).toMatchObject({ state: 'processing', token: req.token, takeovers: 0 });
      expect(after!.leaseUntil.getTime()).toBeGreaterThanOrEqual(before.createdAt.getTime() + 3_600_000);
      expect(after!.leaseUntil.getTime()).toBeLessThan(before.createdAt.getTime() + 3_600_000 + 60_000);
    });

    it('E6: a renewed claim is not taken over once its first lease has passed: a retry answers existing', async () => {
      const req = request({ leaseMs: shortMs });
      const record = claimedRecord(await store().claim(req));
      expect(await store().renew({ ...owner(req), leaseMs: 30_000 })).toBe(true);
      await storePassed(record.leaseUntil);
      const retry = await store().claim(request({ key: req.key }));
      expect(retry).toMatchObject({ outcome: 'existing', record: { token: req.token, state: 'processing' } });
    });

    it('E6: a renewal after a takeover is fenced: false, and the new owner keeps its claim and lease', async () => {
      const first = request({ leaseMs: shortMs });
      const record = claimedRecord(await store().claim(first));
      await storePassed(record.leaseUntil);
      const second = request({ key: first.key, leaseMs: 30_000 });
      const taken = claimedRecord(await store().claim(second));
      expect(await store().renew({ ...owner(first), leaseMs: 3_600_000 })).toBe(false);
      expect(await store().get(scope, first.key)).toMatchObject({
        state: 'processing',
        token: second.token,
        leaseUntil: taken.leaseUntil,
      });
    });

    it('E6: a renewal of a completed claim is refused and changes nothing', async () => {
      const req = request();
      claimedRecord(await store().claim(req));
      expect(await store().complete({ ...owner(req), outcome: success('{"done":true}') })).toBe(true);
      const completed = await store().get(scope, req.key);
      expect(await store().renew({ ...owner(req), leaseMs: 3_600_000 })).toBe(false);
      expect(await store().get(scope, req.key)).toEqual(completed);
    });

    it('E6: a renewal of a released claim is refused and changes nothing', async () => {
      const req = request();
      claimedRecord(await store().claim(req));
      expect(await store().release(owner(req))).toBe(true);
      const released = await store().get(scope, req.key);
      expect(await store().renew({ ...owner(req), leaseMs: 3_600_000 })).toBe(false);
      expect(await store().get(scope, req.key)).toEqual(released);
    });

    it('E6: a renewal with another token, or of a key never claimed, is refused', async () => {
      const req = request();
      const record = claimedRecord(await store().claim(req));
      expect(await store().renew({ ...owner(req), token: randomUUID(), leaseMs: 3_600_000 })).toBe(false);
      expect((await store().get(scope, req.key))!.leaseUntil).toEqual(record.leaseUntil);
      expect(await store().renew({ scope, key: randomUUID(), token: randomUUID(), leaseMs: 1_000 })).toBe(false);
    });

    it('E6: the owner completes a renewed claim as any other', async () => {
      const req = request({ leaseMs: shortMs });
      claimedRecord(await store().claim(req));
      expect(await store().renew({ ...owner(req), leaseMs: 30_000 })).toBe(true);
      expect(await store().complete({ ...owner(req), outcome: success('"ok"') })).toBe(true);
      expect(await store().get(scope, req.key)).toMatchObject({ state: 'completed', outcome: success('"ok"') });
    });

    it('E6: many renewals at once each get their own answer (group commit): the fenced one false, the others true', async () => {
      const requests = Array.from({ length: 40 }, () => request({ leaseMs: 30_000 }));
      for (const req of requests) claimedRecord(await store().claim(req));
      const done = requests[7] as ClaimRequest;
      expect(await store().complete({ ...owner(done), outcome: success('1') })).toBe(true);
      const answers = await Promise.all(requests.map((req) => store().renew({ ...owner(req), leaseMs: 60_000 })));
      expect(answers).toEqual(requests.map((req) => req !== done));
    });

    it('E6: through the engine, a handler running several leases long keeps its claim: retries get 409, it runs once', async () => {
      const key = randomUUID();
      const events: string[] = [];
      const engine = createEngine({ store: store(), lease: shortMs, onEvent: (event) => void events.push(event.type) });
      let runs = 0;
      // The handler runs at least four leases, and until the last retry was answered: a loaded
      // machine that stretches the retries' round trips cannot let it finish before them.
      let retriesDone!: () => void;
      const retried = new Promise<void>((resolve) => (retriesDone = resolve));
      const handler = async () => {
        runs++;
        await Promise.all([sleep(shortMs * 4), retried]);
        return 'charged once';
      };
      const first = engine.execute({ scope, key, fingerprint: 'a' }, handler);
      try {
        for (let i = 0; i < 7; i++) {
          await sleep(shortMs / 2);
          const retry = engine.execute({ scope, key, fingerprint: 'a' }, handler);
          // A retry that took the claim over would wait on the gate: answer it first, then look.
          const answered = await Promise.race([
            retry.then(
              () => 'answered',
              () => 'answered',
            ),
            sleep(shortMs * 2),
          ]);
          if (answered !== 'answered') retriesDone();
          await expect(retry).rejects.toBeInstanceOf(RequestInProgressError);
        }
      } finally {
        retriesDone();
      }
      expect(await first).toMatchObject({ ok: true, value: 'charged once', replayed: false });
      expect(runs).toBe(1);
      expect(events).not.toContain('staleTakeover');
      expect(events).not.toContain('fenced');
    });

    it("E6: an owner that stopped renewing is taken over; its signal aborts with LeaseLostError('fenced') and its completion is fenced", async () => {
      const key = randomUUID();
      const events: string[] = [];
      let unstall!: () => void;
      const stalled = new Promise<void>((resolve) => (unstall = resolve));
      const real = store();
      const stalling: IdempotencyStore = {
        claim: (request) => real.claim(request),
        complete: (args) => real.complete(args),
        saveStep: (args) => real.saveStep(args),
        renew: async (args) => {
          await stalled;
          return real.renew(args);
        },
        countWait: (args) => real.countWait(args),
        release: (args) => real.release(args),
        get: (scope, key) => real.get(scope, key),
        timeline: (scope, key) => real.timeline(scope, key),
        sweep: (options) => real.sweep(options),
        purge: (options) => real.purge(options),
        ping: () => real.ping(),
      };
      const stuck = createEngine({ store: stalling, lease: shortMs, onEvent: (event) => void events.push(event.type) });
      const live = createEngine({ store: real, lease: 30_000 });
      let aborted: unknown;
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const first = stuck.execute({ scope, key, fingerprint: 'a' }, async (claim) => {
        claim.signal.addEventListener('abort', () => (aborted = claim.signal.reason));
        await gate;
        return 'first';
      });
      await storePassed((await untilProcessing(key)).leaseUntil);
      expect(await live.execute({ scope, key, fingerprint: 'a' }, () => 'second')).toMatchObject({
        ok: true,
        value: 'second',
        replayed: false,
      });
      unstall();
      for (let i = 0; aborted === undefined && i < 200; i++) await sleep(10);
      expect(aborted).toBeInstanceOf(LeaseLostError);
      expect((aborted as LeaseLostError).reason).toBe('fenced');
      release();
      await first;
      expect(events).toContain('leaseLost');
      expect(events).toContain('fenced');
      expect(await real.get(scope, key)).toMatchObject({ state: 'completed', outcome: { body: '"second"' } });
    });
  });

  describe('E3w: a duplicate that waits', () => {
    it('E3w: a duplicate with a wait longer than the handler gets the replay, and the handler runs once', async () => {
      const key = randomUUID();
      const engine = createEngine({ store: store(), lease: 30_000 });
      let runs = 0;
      const handler = async () => {
        runs++;
        await sleep(shortMs);
        return `run ${runs}`;
      };
      const first = engine.execute({ scope, key, fingerprint: 'a' }, handler);
      await untilProcessing(key);
      const waiting = await engine.execute({ scope, key, fingerprint: 'a', wait: shortMs * 10 }, handler);
      expect(waiting).toMatchObject({ ok: true, value: 'run 1', replayed: true });
      expect(await first).toMatchObject({ ok: true, value: 'run 1', replayed: false });
      expect(runs).toBe(1);
    });

    it('E3w: a duplicate whose wait ends first answers 409, after the wait', async () => {
      const key = randomUUID();
      const engine = createEngine({ store: store(), lease: 30_000 });
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const first = engine.execute({ scope, key, fingerprint: 'a' }, () => gate.then(() => 'done'));
      await untilProcessing(key);
      const start = Date.now();
      await expect(
        engine.execute({ scope, key, fingerprint: 'a', wait: shortMs }, () => 'again'),
      ).rejects.toBeInstanceOf(RequestInProgressError);
      expect(Date.now() - start).toBeGreaterThanOrEqual(shortMs - 5);
      release();
      await first;
    });

    it('E3w/A1: countWait adds one wait to the live record of that generation, in any state: concurrent counts all land, completion and a takeover keep them, the timeline shows them', async () => {
      const req = request({ leaseMs: shortMs });
      const record = claimedRecord(await store().claim(req));
      expect(record.waits).toBe(0);
      const generation = { scope, key: req.key, generation: 1 };
      expect(await store().countWait(generation)).toBe(true);
      expect(await store().get(scope, req.key)).toMatchObject({ state: 'processing', waits: 1 });
      const counted = await Promise.all(Array.from({ length: 25 }, () => store().countWait(generation)));
      expect(counted).toEqual(counted.map(() => true));
      expect(await store().get(scope, req.key)).toMatchObject({ waits: 26, token: req.token });
      await storePassed(record.leaseUntil);
      const takeover = claimedRecord(await store().claim(request({ key: req.key })));
      expect(takeover).toMatchObject({ takeovers: 1, waits: 26 });
      expect(await store().complete({ scope, key: req.key, token: takeover.token, outcome: success('"done"') })).toBe(
        true,
      );
      expect(await store().countWait(generation)).toBe(true);
      expect(await store().get(scope, req.key)).toMatchObject({ state: 'completed', waits: 27 });
      expect(await store().timeline(scope, req.key)).toEqual([
        expect.objectContaining({ generation: 1, state: 'completed', takeovers: 1, waits: 27 }),
      ]);
    });

    it("E3w/A1: countWait of an unknown key or of another generation answers false and changes nothing; a reused key keeps its earlier generation's waits in history and starts again at 0", async () => {
      const req = request({ leaseMs: shortMs, retentionMs: shortMs });
      expect(await store().countWait({ scope, key: req.key, generation: 1 })).toBe(false);
      expect(await store().get(scope, req.key)).toBeNull();
      claimedRecord(await store().claim(req));
      expect(await store().countWait({ scope, key: req.key, generation: 2 })).toBe(false);
      expect(await store().countWait({ scope: `${scope}-other`, key: req.key, generation: 1 })).toBe(false);
      expect(await store().countWait({ scope, key: req.key, generation: 1 })).toBe(true);
      await store().complete({ ...owner(req), outcome: success('1') });
      const completed = await store().get(scope, req.key);
      expect(completed).toMatchObject({ waits: 1 });
      await storePassed(completed!.expiresAt);
      const reuse = claimedRecord(await store().claim(request({ key: req.key })));
      expect(reuse).toMatchObject({ generation: 2, waits: 0 });
      expect(await store().countWait({ scope, key: req.key, generation: 1 })).toBe(false);
      expect((await store().timeline(scope, req.key)).map(({ generation, waits }) => ({ generation, waits }))).toEqual([
        { generation: 1, waits: 1 },
        { generation: 2, waits: 0 },
      ]);
    });

    it("E3w/A1: through the engine, each duplicate that waits is counted once in its generation's waits, and one that does not wait is not", async () => {
      const key = randomUUID();
      const engine = createEngine({ store: store(), lease: 30_000 });
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let runs = 0;
      const first = engine.execute({ scope, key, fingerprint: 'a' }, async () => {
        runs++;
        await gate;
        return 'paid';
      });
      await untilProcessing(key);
      await expect(engine.execute({ scope, key, fingerprint: 'a' }, () => 'again')).rejects.toBeInstanceOf(
        RequestInProgressError,
      );
      const waiting = [1, 2].map(() => engine.execute({ scope, key, fingerprint: 'a', wait: 60_000 }, () => 'again'));
      for (let i = 0; (await store().get(scope, key))?.waits !== 2 && i < 1000; i++) await sleep(5);
      release();
      for (const answer of await Promise.all(waiting)) expect(answer).toMatchObject({ value: 'paid', replayed: true });
      await first;
      expect(runs).toBe(1);
      expect(await store().timeline(scope, key)).toEqual([expect.objectContaining({ generation: 1, waits: 2 })]);
    });

    it('E3w: a duplicate whose count fails still waits and gets the replay; the failure is a storeError (countWait)', async () => {
      const key = randomUUID();
      const real = store();
      const events: KeyedIdempotencyEvent[] = [];
      const failingCount: IdempotencyStore = {
        claim: (request) => real.claim(request),
        complete: (args) => real.complete(args),
        saveStep: (args) => real.saveStep(args),
        renew: (args) => real.renew(args),
        countWait: () => Promise.reject(new Error('store unreachable')),
        release: (args) => real.release(args),
        get: (scope, key) => real.get(scope, key),
        timeline: (scope, key) => real.timeline(scope, key),
        sweep: (options) => real.sweep(options),
        purge: (options) => real.purge(options),
        ping: () => real.ping(),
      };
      const engine = createEngine({
        store: failingCount,
        lease: 30_000,
        onEvent: (event) => void (event.type !== 'unkeyed' && events.push(event)),
      });
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const first = engine.execute({ scope, key, fingerprint: 'a' }, () => gate.then(() => 'paid'));
      await untilProcessing(key);
      const waiting = engine.execute({ scope, key, fingerprint: 'a', wait: 60_000 }, () => 'again');
      for (let i = 0; !events.some((e) => e.type === 'storeError') && i < 1000; i++) await sleep(5);
      release();
      expect(await waiting).toMatchObject({ value: 'paid', replayed: true });
      await first;
      expect(events.filter((e) => e.type === 'storeError')).toEqual([
        expect.objectContaining({ storeOperation: 'countWait', generation: 1, willRetry: false }),
      ]);
      expect(events.filter((e) => e.type === 'waited')).toEqual([expect.objectContaining({ answer: 'replayed' })]);
      expect(await real.get(scope, key)).toMatchObject({ state: 'completed', waits: 0 });
    });
  });
}
