/**
 * The conformance section of the key-status lookup (`lookUpKeyStatus`, built on `timeline` and
 * `get`): run by `runStoreConformance` against every store, so that the lookup's promises hold
 * on every backend and driver. Not an entry of its own.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { formatScope } from './engine.js';
import { createKeyStatusLookup, lookUpKeyStatus } from './key-status.js';
import { MASKED_ERROR_MESSAGE } from './outcome-mask.js';
import type { ClaimRequest, IdempotencyStore, StoredOutcome } from './store.js';

/** What the section needs from the suite that runs it. */
export interface KeyStatusConformanceContext {
  /** The store under test (created in the suite's `beforeAll`). */
  store: () => IdempotencyStore;
  /** The suite's short lease and retention, in ms. */
  shortMs: number;
  /** Waits until the store's clock is past `instant`. */
  storePassed: (instant: Date) => Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function describeKeyStatusConformance({ store, shortMs, storePassed }: KeyStatusConformanceContext): void {
  describe('key status lookup (timeline + get)', () => {
    const operation = 'payments.create';
    const principal = `alice-${randomUUID()}`;
    const scope = formatScope(operation, principal);
    const target = (key: string) => ({ key, operation, scopes: [{ scope, operation }] });
    const claim = async (overrides: Partial<ClaimRequest> = {}) => {
      const request: ClaimRequest = {
        scope,
        key: randomUUID(),
        fingerprint: 'fp-1',
        token: randomUUID(),
        leaseMs: 30_000,
        retentionMs: 3_600_000,
        expiredReuse: 'execute',
        ...overrides,
      };
      const result = await store().claim(request);
      if (result.outcome !== 'claimed') throw new Error('[idem] conformance: the key was not claimed');
      return { request, record: result.record };
    };
    const complete = async (request: ClaimRequest, outcome: StoredOutcome) =>
      expect(await store().complete({ scope, key: request.key, token: request.token, outcome })).toBe(true);
    /** Past `instant` by the store's clock and by this process's (the lookup's) clock. */
    const passed = async (instant: Date) => {
      await storePassed(instant);
      while (Date.now() <= instant.getTime()) await sleep(instant.getTime() - Date.now() + 1);
    };
    const expiryOf = async (key: string) => (await store().get(scope, key))!.expiresAt;

    it('A1/E8: a resumable key: state resumable, its mode, attempts and step names; no outcome given (not replayable)', async () => {
      const { request } = await claim({ onFailure: 'resume' });
      const owner = { scope, key: request.key, token: request.token };
      expect(await store().saveStep({ ...owner, name: 'reserve', result: '"h_1"' })).toBe(true);
      const failure = {
        kind: 'error' as const,
        status: 503,
        body: '{"name":"Error","message":"timeout","status":503}',
      };
      expect(await store().complete({ ...owner, outcome: failure, resumable: true })).toBe(true);
      const status = await lookUpKeyStatus(store(), target(request.key));
      expect(status?.generations).toEqual([
        expect.objectContaining({
          generation: 1,
          state: 'resumable',
          completedAt: null,
          status: 503,
          outcomeKind: 'error',
          onFailure: 'resume',
          attempts: 1,
          steps: ['reserve'],
          replayable: false,
        }),
      ]);
      expect(status?.generations[0]).not.toHaveProperty('outcome');
    });

    it('A1: a completed key inside its retention: one generation, completed, replayable, with the stored value', async () => {
      const { request, record } = await claim();
      await complete(request, { kind: 'success', status: 200, body: '{"id":"pay_1","amount":4200}' });
      const status = await lookUpKeyStatus(store(), target(request.key));
      expect(status).toEqual({
        key: request.key,
        operation,
        generations: [
          {
            generation: 1,
            operation,
            state: 'completed',
            firstSeenAt: record.createdAt.toISOString(),
            completedAt: expect.any(String),
            expiresAt: expect.any(String),
            archivedAt: null,
            reusedAt: null,
            status: 200,
            outcomeKind: 'success',
            waits: 0,
            onFailure: 'replay',
            attempts: 1,
            steps: [],
            replayable: true,
            outcome: { kind: 'success', value: { id: 'pay_1', amount: 4200 } },
          },
        ],
      });
    });

    it('E4: a stored error inside its retention is described, not thrown: name, code, message, status', async () => {
      const { request } = await claim();
      const error = { name: 'Error', code: 'PAYMENT_REQUIRED', message: 'card declined', status: 402 };
      await complete(request, { kind: 'error', status: 402, body: JSON.stringify({ ...error, data: { secret: 1 } }) });
      const [generation] = (await lookUpKeyStatus(store(), target(request.key)))!.generations;
      expect(generation).toMatchObject({ state: 'completed', status: 402, outcomeKind: 'error', replayable: true });
      expect(generation!.outcome).toEqual({ kind: 'error', error });
    });

    it('R2: a stored 5xx error is described with its message masked: no SQL or parameters leave the store', async () => {
      const { request } = await claim();
      const message = 'Failed query: INSERT INTO payments_ledger (id) VALUES ($1)\nparams: pay_1';
      const error = { name: 'DrizzleQueryError', code: 'INTERNAL_SERVER_ERROR', message, status: 500 };
      await complete(request, { kind: 'error', status: 500, body: JSON.stringify(error) });
      const [generation] = (await lookUpKeyStatus(store(), target(request.key)))!.generations;
      expect(generation!.outcome).toEqual({ kind: 'error', error: { ...error, message: MASKED_ERROR_MESSAGE } });
    });

    it('E3: a key in progress: processing, no outcome', async () => {
      const { request } = await claim();
      const [generation] = (await lookUpKeyStatus(store(), target(request.key)))!.generations;
      expect(generation).toMatchObject({ state: 'processing', status: null, completedAt: null, replayable: false });
      expect(generation).not.toHaveProperty('outcome');
    });

    it('E3w/A1: the duplicates that waited for a generation are counted in its waits', async () => {
      const { request } = await claim();
      for (let i = 0; i < 2; i++) await store().countWait({ scope, key: request.key, generation: 1 });
      const [generation] = (await lookUpKeyStatus(store(), target(request.key)))!.generations;
      expect(generation).toMatchObject({ state: 'processing', waits: 2 });
    });

    it('E4: a released key: released, nothing ran', async () => {
      const { request } = await claim();
      expect(await store().release({ scope, key: request.key, token: request.token })).toBe(true);
      const [generation] = (await lookUpKeyStatus(store(), target(request.key)))!.generations;
      expect(generation).toMatchObject({ state: 'released', status: null, replayable: false });
    });

    it('R1: past its retention a completed key is expired: its status is kept, its body never returned', async () => {
      const { request } = await claim({ retentionMs: shortMs, leaseMs: shortMs });
      await complete(request, { kind: 'success', status: 200, body: '{"secret":"card"}' });
      await passed(await expiryOf(request.key));
      const status = await lookUpKeyStatus(store(), target(request.key));
      expect(status!.generations).toEqual([
        expect.objectContaining({ state: 'expired', status: 200, outcomeKind: 'success', replayable: false }),
      ]);
      expect(JSON.stringify(status)).not.toContain('secret');
    });

    it('R3: after the sweeper archived it: archived, with its timestamps and status, no body', async () => {
      const { request } = await claim({ retentionMs: shortMs, leaseMs: shortMs });
      await complete(request, { kind: 'success', status: 200, body: '{"secret":"card"}' });
      await passed(await expiryOf(request.key));
      while ((await store().sweep({ batchSize: 1000 })).archived > 0);
      const status = await lookUpKeyStatus(store(), target(request.key));
      expect(status!.generations).toEqual([
        expect.objectContaining({
          generation: 1,
          state: 'archived',
          status: 200,
          completedAt: expect.any(String),
          archivedAt: expect.any(String),
          replayable: false,
        }),
      ]);
      expect(JSON.stringify(status)).not.toContain('secret');
    });

    it('R2: a key reused after its retention: both generations, the first archived with its reuse, the second replayable', async () => {
      const first = await claim({ retentionMs: shortMs, leaseMs: shortMs });
      await complete(first.request, { kind: 'success', status: 200, body: '{"charge":1}' });
      await passed(await expiryOf(first.request.key));
      const second = await claim({ key: first.request.key, retentionMs: 3_600_000 });
      expect(second.record.generation).toBe(2);
      await complete(second.request, { kind: 'success', status: 200, body: '{"charge":2}' });
      const status = await lookUpKeyStatus(store(), target(first.request.key));
      expect(status!.generations.map((generation) => [generation.generation, generation.state])).toEqual([
        [1, 'archived'],
        [2, 'completed'],
      ]);
      expect(status!.generations[0]).toMatchObject({ status: 200, replayable: false, reusedAt: expect.any(String) });
      expect(status!.generations[0]).not.toHaveProperty('outcome');
      expect(status!.generations[1]!.outcome).toEqual({ kind: 'success', value: { charge: 2 } });
    });

    it('S1: another principal gets the same answer for a key it does not own as for a key nobody used: null', async () => {
      const { request } = await claim();
      await complete(request, { kind: 'success', status: 200, body: '{"id":"pay_alice"}' });
      const lookUp = createKeyStatusLookup<string>({ store: store(), principal: (caller) => caller });
      const asked = { key: request.key, operation };
      expect(await lookUp(principal, asked)).not.toBeNull();
      const foreign = await lookUp(`mallory-${randomUUID()}`, asked);
      const unknown = await lookUp(`mallory-${randomUUID()}`, { key: randomUUID(), operation });
      expect(foreign).toBeNull();
      expect(unknown).toBeNull();
      // Another operation is another record (S1): the same key there is unknown too.
      expect(await lookUp(principal, { key: request.key, operation: 'payments.refund' })).toBeNull();
    });
  });
}
