/**
 * The conformance cases of E8 (Stripe v2, `onFailure: 'resume'`, and recovery points), store part:
 * steps stored and fenced, attempts counted, the `resumable` state and the resume rule, another
 * payload on a resumable record, the sweep of resumable records, the archive keeping step names,
 * a takeover keeping steps; and, through the engine, the resume of a failure. Run by
 * `runStoreConformance` against the store under test.
 */
import { describe, expect, it } from 'vitest';
import { createEngine } from './engine.js';
import { FingerprintMismatchError } from './errors.js';
import type { KeyedIdempotencyEvent } from './events.js';
import type { ClaimRequest, ClaimResult, IdempotencyStore } from './store.js';

export interface StepsConformance {
  store: () => IdempotencyStore<unknown>;
  scope: string;
  request: (overrides?: Partial<ClaimRequest>) => ClaimRequest;
  storePassed: (instant: Date) => Promise<void>;
  shortMs: number;
}

function claimed(result: ClaimResult): Extract<ClaimResult, { outcome: 'claimed' }> {
  if (result.outcome !== 'claimed') throw new Error(`[idem] conformance: expected a claim, got ${result.outcome}`);
  return result;
}

export function describeStepsConformance({ store, scope, request, storePassed, shortMs }: StepsConformance): void {
  const owner = (req: ClaimRequest) => ({ scope, key: req.key, token: req.token });
  const failure = { kind: 'error' as const, status: 503, body: '{"name":"Error","message":"provider timeout"}' };
  const success = (body: string) => ({ kind: 'success' as const, status: 200, body });

  describe('E8: steps, attempts and resumable records', () => {
    it("E8: a new claim stores the request's onFailure (absent: replay), attempts 1 and no steps", async () => {
      const resume = claimed(await store().claim(request({ onFailure: 'resume' })));
      expect(resume.record).toMatchObject({ onFailure: 'resume', attempts: 1, steps: [] });
      const plain = claimed(await store().claim(request()));
      expect(plain.record).toMatchObject({ onFailure: 'replay', attempts: 1, steps: [] });
    });

    it('E8: saveStep by the owner appends steps in completion order; a step saved again is replaced in place', async () => {
      const req = request({ onFailure: 'resume' });
      claimed(await store().claim(req));
      expect(await store().saveStep({ ...owner(req), name: 'reserve', result: '{"hold":"h_1"}' })).toBe(true);
      expect(await store().saveStep({ ...owner(req), name: 'charge', result: '{"charge":"ch_1"}' })).toBe(true);
      expect(await store().saveStep({ ...owner(req), name: 'reserve', result: '{"hold":"h_2"}' })).toBe(true);
      expect((await store().get(scope, req.key))?.steps).toEqual([
        { name: 'reserve', result: '{"hold":"h_2"}' },
        { name: 'charge', result: '{"charge":"ch_1"}' },
      ]);
      expect((await store().timeline(scope, req.key)).at(-1)).toMatchObject({
        onFailure: 'resume',
        attempts: 1,
        steps: ['reserve', 'charge'],
      });
    });

    it('E8/E6: saveStep is fenced: refused for a token that does not own the processing claim, or once completed', async () => {
      const req = request();
      claimed(await store().claim(req));
      expect(await store().saveStep({ ...owner(req), token: 'not-the-owner', name: 'a', result: '1' })).toBe(false);
      expect(await store().complete({ ...owner(req), outcome: success('1') })).toBe(true);
      expect(await store().saveStep({ ...owner(req), name: 'b', result: '2' })).toBe(false);
      expect((await store().get(scope, req.key))?.steps).toEqual([]);
    });

    it('E8/R1: complete with resumable leaves the record resumable: outcome kept, completedAt null, expiresAt as the claim set it (the window counts from the first sight); it is not replayable', async () => {
      const req = request({ onFailure: 'resume', retentionMs: 3_600_000 });
      const { record: claim } = claimed(await store().claim(req));
      await store().saveStep({ ...owner(req), name: 'reserve', result: '"h_1"' });
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(await store().complete({ ...owner(req), outcome: failure, resumable: true })).toBe(true);
      const record = await store().get(scope, req.key);
      expect(record).toMatchObject({ state: 'resumable', outcome: failure, completedAt: null, attempts: 1 });
      expect(record!.expiresAt.getTime()).toBe(claim.expiresAt.getTime());
      // Fenced like a completion: the token no longer owns a processing claim.
      expect(await store().complete({ ...owner(req), outcome: success('1') })).toBe(false);
    });

    it('E8/R1: a generation resumed twice is kept for exactly its retention from the completion that ends it, not longer', async () => {
      const retentionMs = 3_600_000;
      let req = request({ onFailure: 'resume', retentionMs });
      claimed(await store().claim(req));
      for (let attempt = 2; attempt <= 3; attempt++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        await store().complete({ ...owner(req), outcome: failure, resumable: true });
        req = request({ key: req.key, onFailure: 'resume', retentionMs });
        expect(claimed(await store().claim(req)).resumed?.attempt).toBe(attempt);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(await store().complete({ ...owner(req), outcome: success('"done"') })).toBe(true);
      const done = await store().get(scope, req.key);
      expect(done).toMatchObject({ state: 'completed', attempts: 3 });
      expect(Math.abs(done!.expiresAt.getTime() - done!.completedAt!.getTime() - retentionMs)).toBeLessThanOrEqual(1);
    });

    it('E8: the resume rule: a resumable record with a matching fingerprint is claimed again (same generation, attempts + 1, steps and waits kept, outcome null)', async () => {
      const req = request({ onFailure: 'resume' });
      claimed(await store().claim(req));
      await store().countWait({ scope, key: req.key, generation: 1 });
      await store().saveStep({ ...owner(req), name: 'reserve', result: '"h_1"' });
      await store().complete({ ...owner(req), outcome: failure, resumable: true });
      // The mode is the record's: a retry that asks for replay does not change it.
      const retry = request({ key: req.key, onFailure: 'replay' });
      const resumed = claimed(await store().claim(retry));
      expect(resumed.resumed).toEqual({ attempt: 2, previousStatus: 503 });
      expect(resumed.expired).toBeUndefined();
      expect(resumed.record).toMatchObject({
        generation: 1,
        state: 'processing',
        token: retry.token,
        onFailure: 'resume',
        attempts: 2,
        waits: 1,
        outcome: null,
        steps: [{ name: 'reserve', result: '"h_1"' }],
      });
      expect(resumed.record.leaseUntil.getTime()).toBeGreaterThan(resumed.record.createdAt.getTime());
      // The earlier owner is fenced out; the resumed one completes.
      expect(await store().saveStep({ ...owner(req), name: 'charge', result: '"late"' })).toBe(false);
      expect(await store().saveStep({ ...owner(retry), name: 'charge', result: '"ch_1"' })).toBe(true);
      expect(await store().complete({ ...owner(retry), outcome: success('"done"') })).toBe(true);
      expect(await store().get(scope, req.key)).toMatchObject({ state: 'completed', attempts: 2 });
      expect(await store().timeline(scope, req.key)).toEqual([
        expect.objectContaining({ generation: 1, state: 'completed', attempts: 2, steps: ['reserve', 'charge'] }),
      ]);
    });

    it('E8/F3: a resumable record is not resumed by another fingerprint: existing, unchanged; a null fingerprint matches', async () => {
      const req = request({ onFailure: 'resume' });
      claimed(await store().claim(req));
      await store().complete({ ...owner(req), outcome: failure, resumable: true });
      const other = await store().claim(request({ key: req.key, fingerprint: 'fp-other' }));
      expect(other).toMatchObject({ outcome: 'existing', expired: false, record: { state: 'resumable', attempts: 1 } });
      claimed(await store().claim(request({ key: req.key, fingerprint: null })));
    });

    it('E8/E6: a takeover keeps the steps and counts the attempt', async () => {
      const first = request({ onFailure: 'resume', leaseMs: shortMs });
      const { record } = claimed(await store().claim(first));
      await store().saveStep({ ...owner(first), name: 'reserve', result: '"h_1"' });
      await storePassed(record.leaseUntil);
      const second = request({ key: first.key });
      const takeover = claimed(await store().claim(second));
      expect(takeover.takeover).toBeDefined();
      expect(takeover.record).toMatchObject({
        takeovers: 1,
        attempts: 2,
        onFailure: 'resume',
        steps: [{ name: 'reserve', result: '"h_1"' }],
      });
    });

    it('E8/R3: sweep archives a resumable record past its retention, keeping step names with null results; a reuse starts a new generation without steps', async () => {
      const req = request({ onFailure: 'resume', retentionMs: shortMs, leaseMs: shortMs });
      claimed(await store().claim(req));
      await store().saveStep({ ...owner(req), name: 'reserve', result: '"secret hold"' });
      await store().complete({ ...owner(req), outcome: failure, resumable: true });
      await storePassed((await store().get(scope, req.key))!.expiresAt);
      while ((await store().sweep({ batchSize: 1000 })).archived > 0);
      const archived = await store().get(scope, req.key);
      expect(archived).toMatchObject({ state: 'archived', steps: [{ name: 'reserve', result: null }] });
      expect(archived?.outcome).toEqual({ ...failure, body: null });
      const reuse = claimed(await store().claim(request({ key: req.key, onFailure: 'replay' })));
      expect(reuse.record).toMatchObject({ generation: 2, onFailure: 'replay', attempts: 1, steps: [] });
      expect(reuse.expired?.steps).toEqual([{ name: 'reserve', result: null }]);
      expect((await store().timeline(scope, req.key)).map((entry) => [entry.generation, entry.steps])).toEqual([
        [1, ['reserve']],
        [2, []],
      ]);
    });

    it('E8/R2: a resumable record past its retention is reused as a new generation (steps dropped), not resumed', async () => {
      const req = request({ onFailure: 'resume', retentionMs: shortMs, leaseMs: shortMs });
      claimed(await store().claim(req));
      await store().saveStep({ ...owner(req), name: 'reserve', result: '"h_1"' });
      await store().complete({ ...owner(req), outcome: failure, resumable: true });
      await storePassed((await store().get(scope, req.key))!.expiresAt);
      const reuse = claimed(await store().claim(request({ key: req.key, onFailure: 'resume' })));
      expect(reuse.resumed).toBeUndefined();
      expect(reuse.record).toMatchObject({ generation: 2, attempts: 1, steps: [] });
      expect(reuse.expired).toMatchObject({
        generation: 1,
        state: 'archived',
        steps: [{ name: 'reserve', result: null }],
      });
    });
  });

  describe('E8: through the engine', () => {
    it('E8: onFailure resume: a 5xx after a step leaves the key resumable; the retry skips the step and completes; later retries replay', async () => {
      const events: KeyedIdempotencyEvent[] = [];
      const engine = createEngine({
        store: store(),
        onFailure: 'resume',
        onEvent: (event) => void (event.type !== 'unkeyed' && events.push(event)),
      });
      const { key } = request();
      const ledger: string[] = [];
      let charges = 0;
      const handler = async (claim: Parameters<Parameters<typeof engine.execute>[1]>[0]) => {
        const hold = await claim.step('reserve', (stepKey) => {
          ledger.push(`reserve ${stepKey}`);
          return { hold: 'h_1' };
        });
        const charge = await claim.step('charge', (stepKey) => {
          ledger.push(`charge ${stepKey}`);
          if (++charges === 1) throw Object.assign(new Error('provider timeout'), { status: 503 });
          return { charge: 'ch_1' };
        });
        return { ...hold, ...charge, attempt: claim.attempt };
      };
      const first = await engine.execute({ scope, key, fingerprint: 'fp-1' }, handler);
      expect(first).toMatchObject({ ok: false, replayed: false, resumable: true, generation: 1 });
      expect((await store().get(scope, key))?.state).toBe('resumable');
      const second = await engine.execute({ scope, key, fingerprint: 'fp-1' }, handler);
      expect(second).toEqual({
        ok: true,
        replayed: false,
        value: { hold: 'h_1', charge: 'ch_1', attempt: 2 },
        generation: 1,
      });
      const third = await engine.execute({ scope, key, fingerprint: 'fp-1' }, handler);
      expect(third).toMatchObject({ ok: true, replayed: true, value: { hold: 'h_1', charge: 'ch_1', attempt: 2 } });
      expect(ledger.filter((line) => line.startsWith('reserve'))).toHaveLength(1);
      expect(ledger.filter((line) => line.startsWith('charge'))).toHaveLength(2);
      // Both charge attempts used the same derived step key: the provider deduplicates by it.
      expect(new Set(ledger.filter((line) => line.startsWith('charge'))).size).toBe(1);
      expect(events.find((event) => event.type === 'resumed')).toMatchObject({
        generation: 1,
        attempt: 2,
        previousStatus: 503,
      });
      expect(
        events.filter((event) => event.type === 'completed').map((event) => 'resumable' in event && event.resumable),
      ).toEqual([true, false]);
    });

    it('E8/F3: a retry of a resumable key with another payload is refused 422, nothing runs', async () => {
      const engine = createEngine({ store: store(), onFailure: 'resume' });
      const { key } = request();
      await engine.execute({ scope, key, fingerprint: 'fp-1' }, () => {
        throw Object.assign(new Error('down'), { status: 502 });
      });
      let ran = false;
      await expect(
        engine.execute({ scope, key, fingerprint: 'fp-2' }, () => {
          ran = true;
          return 'ran';
        }),
      ).rejects.toBeInstanceOf(FingerprintMismatchError);
      expect(ran).toBe(false);
    });

    it('E8: onFailure replay (the default): the failure is replayed even though the handler has steps (Stripe v1)', async () => {
      const engine = createEngine({ store: store() });
      const { key } = request();
      let runs = 0;
      const handler = async (claim: Parameters<Parameters<typeof engine.execute>[1]>[0]) => {
        runs++;
        await claim.step('reserve', () => 'h_1');
        throw Object.assign(new Error('provider timeout'), { status: 503 });
      };
      expect(await engine.execute({ scope, key, fingerprint: 'fp-1' }, handler)).toMatchObject({
        ok: false,
        replayed: false,
      });
      expect(await engine.execute({ scope, key, fingerprint: 'fp-1' }, handler)).toMatchObject({
        ok: false,
        replayed: true,
      });
      expect(runs).toBe(1);
      expect(await store().get(scope, key)).toMatchObject({ state: 'completed', onFailure: 'replay', attempts: 1 });
    });
  });
}
