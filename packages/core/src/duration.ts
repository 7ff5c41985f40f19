/** A duration: milliseconds, or a string such as `'500ms'`, `'2s'`, `'30m'`, `'24h'`, `'7d'`. */
export type Duration = number | `${number}${'ms' | 's' | 'm' | 'h' | 'd'}`;

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Converts a {@link Duration} to milliseconds.
 * @throws RangeError on anything but a positive finite amount with a known unit.
 */
export function toMilliseconds(duration: Duration | string): number {
  if (typeof duration === 'number') {
    if (!Number.isFinite(duration) || duration <= 0) throw new RangeError(`[idem] invalid duration: ${duration}`);
    return duration;
  }
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/.exec(duration);
  if (!match)
    throw new RangeError(
      `[idem] invalid duration "${duration}": use a number with ms, s, m, h or d (e.g. 30s, 24h, 7d)`,
    );
  const ms = Number(match[1]) * UNITS[match[2]!]!;
  if (!(ms > 0)) throw new RangeError(`[idem] invalid duration "${duration}": it must be positive`);
  return Math.round(ms);
}

/** Formats milliseconds the way a human reads a policy: `7d`, `24h`, `30s`, `1500ms`. */
export function formatDuration(ms: number): string {
  // Days only from two days up: a retention of one day reads as 24h, as Stripe publishes it.
  if (ms >= 2 * 86_400_000 && ms % 86_400_000 === 0) return `${ms / 86_400_000}d`;
  for (const [unit, size] of [
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
