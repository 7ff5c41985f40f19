/**
 * Hardening (issue 14): defects an adversarial black-box pass found in the core, each pinned by
 * a test that failed before its fix.
 */
import { describe, expect, it } from 'vitest';
import { canonicalize, computeFingerprint, InputTooDeepError, MAX_FINGERPRINT_DEPTH } from '@idem/core';

/** `depth` containers nested in one another, built without recursion. */
function nested(depth: number, wrap: (inner: unknown) => unknown): unknown {
  let value: unknown = 1;
  for (let level = 0; level < depth; level++) value = wrap(value);
  return value;
}

describe('canonicalize on deeply nested input (issue 14, item 15)', () => {
  it.each([
    ['arrays', (inner: unknown) => [inner]],
    ['objects', (inner: unknown) => ({ a: inner })],
    ['maps', (inner: unknown) => new Map([['a', inner]])],
    ['sets', (inner: unknown) => new Set([inner])],
  ])('F1: %s nested 100,000 deep are refused with a 400 InputTooDeepError, not a stack overflow', (_kind, wrap) => {
    const deep = nested(100_000, wrap);
    let thrown: unknown;
    try {
      canonicalize(deep);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InputTooDeepError);
    expect(thrown).toMatchObject({ status: 400, code: 'idempotency_input_too_deep', maxDepth: MAX_FINGERPRINT_DEPTH });
  });

  it('F1: input exactly MAX_FINGERPRINT_DEPTH containers deep is still fingerprinted; one more is refused', async () => {
    const deepest = nested(MAX_FINGERPRINT_DEPTH, (inner) => [inner]);
    expect(canonicalize(deepest)).toBe(`${'['.repeat(MAX_FINGERPRINT_DEPTH)}1${']'.repeat(MAX_FINGERPRINT_DEPTH)}`);
    await expect(computeFingerprint({ tree: deepest })).rejects.toBeInstanceOf(InputTooDeepError);
    await expect(computeFingerprint(deepest)).resolves.toMatch(/^[0-9a-f]{64}$/);
  });
});
