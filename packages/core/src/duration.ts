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

const SPANS = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1000],
] as const;

/**
 * A duration as a person reads it, the one format of every duration idem prints (the published
 * policy, error messages, the CLI, the example's pages): `250ms`; `1.5s` (seconds to one decimal
 * below a minute); then the two largest units, rounded down, with a zero second unit left out —
 * `1m 30s`, `2h 5m`, `24h`, `36h`, `3d 4h`. Days only from two days up: a retention of one day
 * reads `24h`, as Stripe publishes it. Negative amounts read as `0ms`.
 */
export function formatDuration(ms: number): string {
  const rounded = Math.max(0, Math.round(ms));
  if (rounded < 1000) return `${rounded}ms`;
  if (rounded < 60_000) return `${Math.floor(rounded / 100) / 10}s`;
  const parts: string[] = [];
  let rest = rounded;
  for (const [unit, size] of SPANS) {
    if (unit === 'd' && rounded < 2 * size) continue;
    const amount = Math.floor(rest / size);
    if (parts.length === 0 && amount === 0) continue;
    rest -= amount * size;
    if (amount > 0) parts.push(`${amount}${unit}`);
    else parts.push('');
    if (parts.length === 2) break;
  }
  return parts.filter(Boolean).join(' ');
}
