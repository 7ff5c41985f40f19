/**
 * The group bookkeeping every dialect without per-row answers shares (`group-commit.ts`, SQLite
 * and MySQL): which requests of a group insert, and which row answers which request.
 */
import type { ClaimRequest } from '@idem/core/store';
import { describe, expect, it } from 'vitest';
import { answerCompletions, keyOf, liveByKey, planClaims } from '../src/group-commit.ts';
import type { LiveRead, LiveRow } from '../src/record-rows.ts';

const now = new Date('2026-12-03T00:00:00Z');
const request = (key: string, token: string, scope = 's'): ClaimRequest => ({
  scope,
  key,
  fingerprint: 'fp',
  token,
  leaseMs: 30_000,
  retentionMs: 60_000,
  expiredReuse: 'execute',
});
const live = ({ scope, key, token }: ClaimRequest): LiveRead => ({
  row: {
    scope,
    key,
    token,
    generation: 1,
    fingerprint: 'fp',
    state: 'processing',
    createdAt: now,
    leaseUntil: now,
    expiresAt: now,
    completedAt: null,
    archivedAt: null,
    takeovers: 0,
    waits: 0,
    outcomeKind: null,
    outcomeStatus: null,
    body: null,
    onFailure: 'replay',
    attempts: 1,
    steps: '[]',
  } satisfies LiveRow,
  now,
});

describe('group bookkeeping (group-commit.ts)', () => {
  it('inserts one request per missing key (the first) and answers the others with its row as live', () => {
    const [a, b, c] = [request('k1', 't1'), request('k1', 't2'), request('k2', 't3')];
    const plan = planClaims([a, b, c], new Map());
    expect(plan.misses).toEqual([a, c]);
    const answers = plan.answer(liveByKey([live(a), live(c)]));
    expect(answers).toEqual([{ inserted: live(a).row }, { live: live(a) }, { inserted: live(c).row }]);
  });

  it('answers a key the read found live without inserting it', () => {
    const existing = live(request('k1', 'other'));
    const plan = planClaims([request('k1', 't1')], liveByKey([existing]));
    expect(plan.misses).toEqual([]);
    expect(plan.answer(new Map())).toEqual([{ live: existing }]);
  });

  it('answers a winner whose key holds another token (a claim committed meanwhile) with that row as live, and a row it cannot read as undefined', () => {
    const [a, b] = [request('k1', 't1'), request('k2', 't2')];
    const plan = planClaims([a, b], new Map());
    const someoneElse = live(request('k1', 'someone else'));
    expect(plan.answer(liveByKey([someoneElse]))).toEqual([{ live: someoneElse }, undefined]);
  });

  it('leaves a request the dialect does not admit to the one-request path (undefined), never inserting it', () => {
    const [a, b] = [request('k1', 't1'), request('k2', 't2')];
    const plan = planClaims([a, b], new Map(), (r) => r !== b);
    expect(plan.misses).toEqual([a]);
    expect(plan.answer(liveByKey([live(a)]))).toEqual([{ inserted: live(a).row }, undefined]);
  });

  it('keeps (scope, key) pairs apart however the strings split', () => {
    expect(keyOf('ab', 'c')).not.toBe(keyOf('a', 'bc'));
  });

  it('answers each completion by its owner, a completion twice true only once', () => {
    const one = { scope: 's', key: 'k1', token: 't1' };
    const two = { scope: 's', key: 'k2', token: 't2' };
    const stale = { scope: 's', key: 'k1', token: 'stale' };
    expect(answerCompletions([one, stale, two, one], [one, two])).toEqual([true, false, true, false]);
  });
});
