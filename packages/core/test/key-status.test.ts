/**
 * The key-status lookup against an independent model: generated histories of executions by
 * several principals over a few keys, with time moving and the sweeper running, on the real
 * engine and MemoryStore. Whatever the history, a lookup never returns a stored body past its
 * retention, never another principal's record, answers an unknown key and a foreign key alike,
 * and lists every generation (R1, R2, R3, S1, A1). Then the reading of status queries (K1–K3)
 * and the typed reconciliation clients get.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createEngine, formatScope, InvalidKeyError, MemoryStore, MissingKeyError } from '@idem/core';
import { createKeyStatusLookup, KeyStatusQueryError, parseKeyStatusQuery } from '@idem/core/key-status';
import { toReconciliation, type KeyStatusDocument } from '@idem/core/client';

const RETENTION_MS = 10_000;
const TOLERANCE_MS = 1000;
const PRINCIPALS = ['alice', 'bob', 'carol'] as const;
const KEYS = ['k1', 'k2', 'k3'] as const;
const OPERATION = 'payments.create';

type Action =
  | { kind: 'execute'; principal: (typeof PRINCIPALS)[number]; key: (typeof KEYS)[number] }
  | { kind: 'advance'; ms: number }
  /** Moves the clock to around the end of a record's retention, where the tolerance matters. */
  | { kind: 'nearExpiry'; principal: (typeof PRINCIPALS)[number]; key: (typeof KEYS)[number]; offsetMs: number }
  | { kind: 'sweep' }
  | { kind: 'lookUp'; principal: (typeof PRINCIPALS)[number]; key: (typeof KEYS)[number] };

const action: fc.Arbitrary<Action> = fc.oneof(
  fc.record({
    kind: fc.constant('execute' as const),
    principal: fc.constantFrom(...PRINCIPALS),
    key: fc.constantFrom(...KEYS),
  }),
  fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 2 * RETENTION_MS }) }),
  fc.record({
    kind: fc.constant('nearExpiry' as const),
    principal: fc.constantFrom(...PRINCIPALS),
    key: fc.constantFrom(...KEYS),
    offsetMs: fc.integer({ min: -2 * TOLERANCE_MS, max: TOLERANCE_MS }),
  }),
  fc.constant({ kind: 'sweep' as const }),
  fc.record({
    kind: fc.constant('lookUp' as const),
    principal: fc.constantFrom(...PRINCIPALS),
    key: fc.constantFrom(...KEYS),
  }),
);

/** The model: per (principal, key), each generation's completion time and value, and whether the sweeper archived the last one. */
interface ModelGeneration {
  completedAt: number;
  value: string;
}

describe('the key-status lookup against a model (generated histories)', () => {
  it('R1, R2, R3, S1: never a body past the retention, never a foreign record, unknown and foreign alike, every generation listed', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 40 }), async (actions) => {
        let clock = Date.UTC(2026, 11, 1);
        const store = new MemoryStore({ now: () => clock });
        const engine = createEngine({ store, retention: RETENTION_MS, lease: '1s' });
        const lookUp = createKeyStatusLookup<string>({
          store,
          principal: (principal) => principal,
          now: () => clock,
          clockToleranceMs: TOLERANCE_MS,
        });
        const model = new Map<string, { generations: ModelGeneration[]; swept: boolean }>();
        let executions = 0;

        for (const step of actions) {
          if (step.kind === 'advance') clock += step.ms;
          else if (step.kind === 'nearExpiry') {
            const last = model.get(`${step.principal}/${step.key}`)?.generations.at(-1);
            if (last) clock = Math.max(clock, last.completedAt + RETENTION_MS + step.offsetMs);
          } else if (step.kind === 'sweep') {
            await store.sweep({ batchSize: 1000 });
            for (const entry of model.values()) {
              const last = entry.generations.at(-1)!;
              if (last.completedAt + RETENTION_MS <= clock) entry.swept = true;
            }
          } else if (step.kind === 'execute') {
            const id = `${step.principal}/${step.key}`;
            const entry = model.get(id) ?? { generations: [], swept: false };
            model.set(id, entry);
            const last = entry.generations.at(-1);
            const value = `${id}#${++executions}`;
            const result = await engine.execute(
              { scope: formatScope(OPERATION, step.principal), key: step.key, fingerprint: null },
              () => value,
            );
            if (!last || last.completedAt + RETENTION_MS <= clock) {
              expect(result).toMatchObject({ ok: true, replayed: false, value });
              entry.generations.push({ completedAt: clock, value });
              entry.swept = false;
            } else expect(result).toMatchObject({ ok: true, replayed: true, value: last.value });
          } else {
            const status = await lookUp(step.principal, { key: step.key, operation: OPERATION });
            const entry = model.get(`${step.principal}/${step.key}`);
            if (!entry) {
              // Unknown to this principal, whoever else used the key: the same answer as a key nobody used.
              expect(status).toBeNull();
              expect(await lookUp(step.principal, { key: 'never-used', operation: OPERATION })).toBeNull();
              continue;
            }
            expect(status!.generations.map((generation) => generation.generation)).toEqual(
              entry.generations.map((_, index) => index + 1),
            );
            entry.generations.forEach((expected, index) => {
              const generation = status!.generations[index]!;
              const latest = index === entry.generations.length - 1;
              const expiresAt = expected.completedAt + RETENTION_MS;
              expect(Date.parse(generation.completedAt!)).toBe(expected.completedAt);
              expect(generation.status).toBe(200);
              const state = !latest || entry.swept ? 'archived' : expiresAt <= clock ? 'expired' : 'completed';
              expect(generation.state).toBe(state);
              const replayable = latest && !entry.swept && expiresAt > clock + TOLERANCE_MS;
              expect(generation.replayable).toBe(replayable);
              if (replayable) expect(generation.outcome).toEqual({ kind: 'success', value: expected.value });
              else expect(generation).not.toHaveProperty('outcome');
            });
            // Only this principal's values ever appear.
            for (const value of JSON.stringify(status).match(/\w+\/k\d#\d+/g) ?? [])
              expect(value.startsWith(`${step.principal}/`)).toBe(true);
          }
        }
      }),
      { seed: 20_261_201, numRuns: 200 },
    );
  });
});

describe('parseKeyStatusQuery', () => {
  it('K1–K3: takes a valid key and operation; refuses a malformed key with 400, a missing one with 400 (K2)', () => {
    expect(parseKeyStatusQuery({ key: 'order-1', operation: 'payments.create' })).toEqual({
      key: 'order-1',
      operation: 'payments.create',
    });
    for (const key of ['a b', 'a"b', 'a\\b', 'é', 'k'.repeat(256), 42])
      expect(() => parseKeyStatusQuery({ key, operation: 'payments.create' })).toThrow(InvalidKeyError);
    for (const key of [undefined, null, ''])
      expect(() => parseKeyStatusQuery({ key, operation: 'payments.create' })).toThrow(MissingKeyError);
    expect(() => parseKeyStatusQuery(null)).toThrow(MissingKeyError);
  });

  it('takes an operation with spaces inside (a route: POST /v1/payments); refuses a missing, empty, too long, space-padded or non-ASCII one with a typed 400', () => {
    expect(parseKeyStatusQuery({ key: 'k', operation: 'POST /v1/payments' }).operation).toBe('POST /v1/payments');
    for (const operation of [undefined, '', ' a', 'a ', 'a\tb', 'x'.repeat(513), 'op\u0000', 'é', 7]) {
      const refusal = (() => {
        try {
          parseKeyStatusQuery({ key: 'k', operation });
        } catch (error) {
          return error;
        }
      })();
      expect(refusal).toBeInstanceOf(KeyStatusQueryError);
      expect(refusal).toMatchObject({ status: 400, code: 'idempotency_status_query_invalid' });
    }
  });
});

describe('toReconciliation', () => {
  const generation = (overrides: Partial<KeyStatusDocument['generations'][number]>) => ({
    generation: 1,
    operation: OPERATION,
    state: 'completed' as const,
    firstSeenAt: '2026-12-01T10:41:59.000Z',
    completedAt: '2026-12-01T10:42:00.000Z',
    expiresAt: '2026-12-02T10:42:00.000Z',
    archivedAt: null,
    reusedAt: null,
    status: 200,
    outcomeKind: 'success' as const,
    waits: 0,
    replayable: false,
    ...overrides,
  });
  const document = (...generations: KeyStatusDocument['generations']) => ({
    key: 'k',
    operation: OPERATION,
    generations,
  });

  it('nothing found: not_found', () => {
    expect(toReconciliation('k', OPERATION, null)).toEqual({ kind: 'not_found', key: 'k', operation: OPERATION });
  });

  it('executed: the first generation that ran, when and with which status; the value only while replayable', () => {
    const replayable = toReconciliation('k', OPERATION, {
      ...document(generation({ replayable: true, outcome: { kind: 'success', value: { id: 'pay_1' } } })),
    });
    expect(replayable).toMatchObject({
      kind: 'executed',
      at: new Date('2026-12-01T10:42:00.000Z'),
      status: 200,
      replayable: true,
      value: { id: 'pay_1' },
      executions: 1,
    });
    const twice = toReconciliation(
      'k',
      OPERATION,
      document(
        generation({ state: 'archived', reusedAt: '2026-12-03T00:00:00.000Z' }),
        generation({ generation: 2, completedAt: '2026-12-03T00:00:01.000Z', status: 500, outcomeKind: 'error' }),
      ),
    );
    expect(twice).toMatchObject({ kind: 'executed', generation: 1, status: 200, replayable: false, executions: 2 });
    expect(twice).not.toHaveProperty('value');
  });

  it('processing: claimed with no outcome stored; released only: not_found (nothing ran)', () => {
    expect(
      toReconciliation(
        'k',
        OPERATION,
        document(generation({ state: 'processing', completedAt: null, status: null, outcomeKind: null })),
      ),
    ).toMatchObject({ kind: 'processing', since: new Date('2026-12-01T10:41:59.000Z') });
    expect(
      toReconciliation(
        'k',
        OPERATION,
        document(generation({ state: 'released', completedAt: null, status: null, outcomeKind: null })),
      ),
    ).toEqual({ kind: 'not_found', key: 'k', operation: OPERATION });
  });

  it('refuses an answer that is not a key status document', () => {
    expect(() => toReconciliation('k', OPERATION, { key: 'k', operation: OPERATION } as never)).toThrow(
      /did not answer a key status document/,
    );
  });
});
