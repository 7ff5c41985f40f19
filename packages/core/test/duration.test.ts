import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatDuration, toMilliseconds } from '@idem/core';

/**
 * The milliseconds a formatted duration names: the sum of its parts (`3d 4h` → 3 days and 4 hours).
 * `0ms` names nothing: `toMilliseconds` refuses a zero duration as configuration, so it is read here.
 */
const named = (text: string) =>
  text === '0ms' ? 0 : text.split(' ').reduce((sum, part) => sum + toMilliseconds(part), 0);

describe('formatDuration: the one duration format idem prints', () => {
  it.each([
    [0, '0ms'],
    [250, '250ms'],
    [1000, '1s'],
    [1500, '1.5s'],
    [59_999, '59.9s'],
    [60_000, '1m'],
    [90_000, '1m 30s'],
    [3_600_000, '1h'],
    [86_400_000, '24h'],
    [88_200_000, '24h 30m'],
    [93_784_000, '26h 3m'],
    [172_800_000, '2d'],
    [273_600_000, '3d 4h'],
    [7 * 86_400_000, '7d'],
    [-5, '0ms'],
  ])('%i ms reads %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  it('never names more than the duration, and is short of it by less than the smallest unit it shows', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 400 * 86_400_000 }), (ms) => {
        const text = formatDuration(ms);
        const parts = text.split(' ');
        expect(parts.length).toBeLessThanOrEqual(2);
        const shown = named(text);
        expect(shown).toBeLessThanOrEqual(ms);
        const smallest = Math.min(...parts.map((part) => toMilliseconds(`1${part.replace(/^[\d.]+/, '')}`)));
        // Below a minute the seconds carry one decimal: short by less than 100 ms.
        expect(ms - shown).toBeLessThan(ms < 60_000 && ms >= 1000 ? 100 : smallest);
        // A day reads in hours until two days.
        if (ms < 2 * 86_400_000) expect(text).not.toMatch(/d/);
      }),
      { examples: [[0], [999], [1000], [59_999], [60_000], [2 * 86_400_000 - 1]] },
    );
  });
});
