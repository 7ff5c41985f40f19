/**
 * E8 on each dialect, beyond the core conformance suite: what the `steps`, `on_failure` and
 * `attempts` columns hold, the compare-and-set of `saveStep` under concurrent steps of one owner,
 * results kept byte for byte through the JSON text, resumable completions through the group path,
 * and archiving (sweep, and a reused key's history) keeping the step names with their results gone,
 * in each dialect's JSON functions. Registered inside `describeStoreBehaviour`.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { expect, it } from 'vitest';
import type { ClaimRequest, ClaimResult } from '@idem/core/store';
import type { DrizzleStore } from '../src/index.ts';
import type { StoreHarness } from './store-behaviour.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const keyColumn = sql.identifier('key');

function claimed(result: ClaimResult) {
  if (result.outcome !== 'claimed') throw new Error(`expected claimed, got ${result.outcome}`);
  return result;
}

/** Step results that a JSON text column must give back byte for byte. */
export const AWKWARD_RESULTS = [
  '{"z":1,"a":{"é":"✓ 日本 🧾"},"n":-0.0,"big":12345678901234567890}',
  '"quote \\" backslash \\\\ nul \\u0000 lone \\ud800"',
  '%_\\%\\_',
  "it's",
  '',
  'x'.repeat(100_000),
];

/** Step names a dialect's JSON functions must keep as they are when archiving. */
const AWKWARD_NAMES = ['reserve', 'charge 日本', 'a%b_c', 'quote"name', "it's", '\\', '[0]', '$.name'];

export function stepsBehaviour(context: () => { harness: StoreHarness; store: DrizzleStore }): void {
  const scope = `steps/${randomUUID()}`;
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
  const failure = { kind: 'error', status: 503, body: '{"error":"provider timeout"}' } as const;
  const rawSteps = async (table: 'idem_keys' | 'idem_key_history', key: string) => {
    const rows = await context().harness.rows<{ steps: string }>(
      sql`SELECT steps FROM ${sql.identifier(table)} WHERE scope = ${scope} AND ${keyColumn} = ${key} ORDER BY generation`,
    );
    return rows.map((row) => JSON.parse(row.steps) as unknown);
  };

  it('E8: a new claim stores the request mode (absent: replay), attempts 1 and no steps, alone and grouped', async () => {
    const { store } = context();
    const requests = Array.from({ length: 12 }, (_, i) =>
      request(i % 3 === 2 ? {} : { onFailure: i % 3 === 0 ? 'resume' : 'replay' }),
    );
    // Concurrent claims go through the group form of the dialect (group commit is on).
    const results = await Promise.all(requests.map((r) => store.claim(r)));
    for (const [i, result] of results.entries()) {
      expect(claimed(result).record).toMatchObject({
        onFailure: i % 3 === 0 ? 'resume' : 'replay',
        attempts: 1,
        steps: [],
      });
      expect(await store.get(scope, requests[i]!.key)).toMatchObject({
        onFailure: i % 3 === 0 ? 'resume' : 'replay',
        attempts: 1,
        steps: [],
      });
    }
  });

  it('E8: rule 3 (a released claim taken over as new) writes the new request mode, attempts 1 and no steps', async () => {
    const { store } = context();
    const first = request({ onFailure: 'resume' });
    claimed(await store.claim(first));
    await store.saveStep({ scope, key: first.key, token: first.token, name: 'reserve', result: '1' });
    expect(await store.release({ scope, key: first.key, token: first.token })).toBe(true);
    const again = claimed(await store.claim(request({ key: first.key })));
    expect(again.record).toMatchObject({
      generation: 1,
      state: 'processing',
      onFailure: 'replay',
      attempts: 1,
      steps: [],
    });
  });

  it('E8: saveStep appends in completion order, replaces a name in place, and is fenced on (token, processing)', async () => {
    const { store } = context();
    const r = request({ onFailure: 'resume' });
    claimed(await store.claim(r));
    const owner = { scope, key: r.key, token: r.token };
    expect(await store.saveStep({ ...owner, name: 'reserve', result: '{"id":1}' })).toBe(true);
    expect(await store.saveStep({ ...owner, name: 'charge', result: '{"id":2}' })).toBe(true);
    expect(await store.saveStep({ ...owner, name: 'reserve', result: '{"id":3}' })).toBe(true);
    expect(await store.saveStep({ ...owner, name: 'charge', result: '{"id":2}' })).toBe(true);
    expect((await store.get(scope, r.key))?.steps).toEqual([
      { name: 'reserve', result: '{"id":3}' },
      { name: 'charge', result: '{"id":2}' },
    ]);
    expect(await store.saveStep({ ...owner, token: 'not-the-owner', name: 'x', result: '1' })).toBe(false);
    expect(await store.saveStep({ scope, key: 'no such key', token: r.token, name: 'x', result: '1' })).toBe(false);
    expect(await store.complete({ ...owner, outcome: { kind: 'success', status: 200, body: '1' } })).toBe(true);
    expect(await store.saveStep({ ...owner, name: 'late', result: '1' })).toBe(false);
    expect((await store.get(scope, r.key))?.steps.map((step) => step.name)).toEqual(['reserve', 'charge']);
  });

  it('E8: concurrent steps of one owner (Promise.all) are all kept: saveStep is a compare-and-set on the column', async () => {
    const { store } = context();
    const r = request();
    claimed(await store.claim(r));
    const names = Array.from({ length: 16 }, (_, i) => `step-${i}`);
    const saved = await Promise.all(
      names.map((name) => store.saveStep({ scope, key: r.key, token: r.token, name, result: JSON.stringify(name) })),
    );
    expect(saved).toEqual(names.map(() => true));
    const steps = (await store.get(scope, r.key))?.steps ?? [];
    expect(steps.map((step) => step.name).sort()).toEqual([...names].sort());
    for (const step of steps) expect(step.result).toBe(JSON.stringify(step.name));
  });

  it('E8: step names and results round-trip byte for byte through the JSON text (unicode, escapes, %, _, quotes, 100 kB)', async () => {
    const { store } = context();
    const r = request();
    claimed(await store.claim(r));
    for (const [i, result] of AWKWARD_RESULTS.entries())
      expect(await store.saveStep({ scope, key: r.key, token: r.token, name: AWKWARD_NAMES[i]!, result })).toBe(true);
    expect((await store.get(scope, r.key))?.steps).toEqual(
      AWKWARD_RESULTS.map((result, i) => ({ name: AWKWARD_NAMES[i], result })),
    );
  });

  it('E8: complete with resumable (alone and grouped) leaves the record resumable: outcome kept, completedAt null, retention from now', async () => {
    const { store } = context();
    const requests = Array.from({ length: 8 }, () => request({ onFailure: 'resume' }));
    const records = (await Promise.all(requests.map((r) => store.claim(r)))).map((result) => claimed(result).record);
    const done = await Promise.all(
      requests.map((r, i) =>
        store.complete({
          scope,
          key: r.key,
          token: r.token,
          outcome: i % 2 === 0 ? failure : { kind: 'success', status: 200, body: '"ok"' },
          ...(i % 2 === 0 && { resumable: true }),
        }),
      ),
    );
    expect(done).toEqual(requests.map(() => true));
    for (const [i, r] of requests.entries()) {
      const record = await store.get(scope, r.key);
      if (i % 2 === 0) {
        expect(record).toMatchObject({ state: 'resumable', completedAt: null, outcome: failure });
      } else {
        expect(record).toMatchObject({ state: 'completed', outcome: { status: 200, body: '"ok"' } });
        expect(record?.completedAt).toBeInstanceOf(Date);
      }
      // R1: the retention (60 s) counts from now, as for a completion.
      const retention = record!.expiresAt.getTime() - records[i]!.createdAt.getTime();
      expect(retention).toBeGreaterThanOrEqual(60_000);
      expect(retention).toBeLessThan(90_000);
      // Fenced as a completion: the record is no longer the owner's processing claim.
      expect(await store.saveStep({ scope, key: r.key, token: r.token, name: 'late', result: '1' })).toBe(false);
      expect(await store.complete({ scope, key: r.key, token: r.token, outcome: failure, resumable: true })).toBe(
        false,
      );
    }
  });

  it('E8/R3: the sweep archives a resumable record past its retention; the steps keep their names in order, results null', async () => {
    const { store } = context();
    const r = request({ onFailure: 'resume', retentionMs: 1 });
    claimed(await store.claim(r));
    for (const [i, name] of AWKWARD_NAMES.entries())
      await store.saveStep({
        scope,
        key: r.key,
        token: r.token,
        name,
        result: AWKWARD_RESULTS[i % AWKWARD_RESULTS.length]!,
      });
    expect(await store.complete({ scope, key: r.key, token: r.token, outcome: failure, resumable: true })).toBe(true);
    const emptyKey = request({ retentionMs: 1 });
    claimed(await store.claim(emptyKey));
    await store.complete({ scope, key: emptyKey.key, token: emptyKey.token, outcome: failure, resumable: true });
    await sleep(20);
    let archived = 0;
    for (let round = 0; round < 100; round++) {
      const { archived: n } = await store.sweep({ batchSize: 1000 });
      archived += n;
      if (n < 1000) break;
    }
    expect(archived).toBeGreaterThanOrEqual(2);
    const record = await store.get(scope, r.key);
    expect(record).toMatchObject({ state: 'archived', outcome: { status: 503, body: null } });
    expect(record?.steps).toEqual(AWKWARD_NAMES.map((name) => ({ name, result: null })));
    expect((await store.get(scope, emptyKey.key))?.steps).toEqual([]);
    expect((await store.timeline(scope, r.key)).map((entry) => entry.steps)).toEqual([AWKWARD_NAMES]);
    expect(await rawSteps('idem_keys', r.key)).toEqual([AWKWARD_NAMES.map((name) => ({ name, result: null }))]);
  });

  it('E8/R2: a reused key moves its generation to history with the step names and no results; the new generation starts with none', async () => {
    const { store } = context();
    const first = request({ onFailure: 'resume', retentionMs: 1 });
    claimed(await store.claim(first));
    await store.saveStep({ scope, key: first.key, token: first.token, name: 'reserve', result: '{"id":1}' });
    await store.saveStep({ scope, key: first.key, token: first.token, name: 'charge', result: '{"id":2}' });
    await store.complete({ scope, key: first.key, token: first.token, outcome: failure, resumable: true });
    await sleep(20);
    const second = claimed(await store.claim(request({ key: first.key, onFailure: 'replay' })));
    expect(second.record).toMatchObject({ generation: 2, onFailure: 'replay', attempts: 1, steps: [] });
    expect(second.expired).toMatchObject({
      generation: 1,
      state: 'archived',
      onFailure: 'resume',
      attempts: 1,
      steps: [
        { name: 'reserve', result: null },
        { name: 'charge', result: null },
      ],
    });
    expect(await rawSteps('idem_key_history', first.key)).toEqual([
      [
        { name: 'reserve', result: null },
        { name: 'charge', result: null },
      ],
    ]);
    expect(
      (await store.timeline(scope, first.key)).map(({ onFailure, attempts, steps, state }) => ({
        onFailure,
        attempts,
        steps,
        state,
      })),
    ).toEqual([
      { onFailure: 'resume', attempts: 1, steps: ['reserve', 'charge'], state: 'archived' },
      { onFailure: 'replay', attempts: 1, steps: [], state: 'processing' },
    ]);
  });

  it('E8/E6: a takeover counts an attempt and keeps the steps; a resume counts one, keeps steps and waits, and drops the outcome', async () => {
    const { store } = context();
    const first = request({ onFailure: 'resume', leaseMs: 1 });
    claimed(await store.claim(first));
    await store.saveStep({ scope, key: first.key, token: first.token, name: 'reserve', result: '1' });
    await sleep(20);
    const second = request({ key: first.key, onFailure: 'replay' });
    const takenOver = claimed(await store.claim(second));
    expect(takenOver.takeover?.previousToken).toBe(first.token);
    // The mode is the generation's, fixed at its claim: a takeover keeps it.
    expect(takenOver.record).toMatchObject({
      onFailure: 'resume',
      attempts: 2,
      takeovers: 1,
      steps: [{ name: 'reserve', result: '1' }],
    });
    expect(await store.countWait({ scope, key: first.key, generation: 1 })).toBe(true);
    expect(
      await store.complete({ scope, key: first.key, token: second.token, outcome: failure, resumable: true }),
    ).toBe(true);
    const third = request({ key: first.key, fingerprint: null, onFailure: 'replay' });
    const resumed = claimed(await store.claim(third));
    expect(resumed.resumed).toEqual({ attempt: 3, previousStatus: 503 });
    expect(resumed.record).toMatchObject({
      generation: 1,
      state: 'processing',
      token: third.token,
      fingerprint: 'fp-1',
      onFailure: 'resume',
      attempts: 3,
      takeovers: 1,
      waits: 1,
      outcome: null,
      completedAt: null,
      steps: [{ name: 'reserve', result: '1' }],
    });
    expect(await store.saveStep({ scope, key: first.key, token: second.token, name: 'charge', result: '2' })).toBe(
      false,
    );
    expect(await store.saveStep({ scope, key: first.key, token: third.token, name: 'charge', result: '2' })).toBe(true);
  });
}
