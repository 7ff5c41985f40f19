import { describe, it } from 'vitest';
import { MemoryStore } from '../src/memory-store.ts';
import { checkStepsModel } from './support/steps-model.ts';

describe('E8/E6 model: recovery points and the two failure modes (MemoryStore)', () => {
  it('E8/E6: random handlers of 1–5 steps, failures and crashes before, inside and after a step, retries and takeovers, replay and resume: each step completes once per generation, the answer matches the steps, v1 outcomes never change', async () => {
    let now = Date.parse('2026-12-01T10:00:00.000Z');
    const store = new MemoryStore({ now: () => now });
    await checkStepsModel({
      store: () => store,
      passTime: async (ms) => void (now += ms),
      leaseMs: 3_600_000,
      numRuns: 300,
    });
  }, 60_000);
});
