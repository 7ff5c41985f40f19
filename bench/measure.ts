/**
 * Timing on a noisy machine: variants run interleaved in rounds (A B C A B C …), each round
 * times one batch per variant, and what is reported is medians and the median of per-round
 * ratios — never one absolute time.
 */

/** The median of a non-empty list (the mean of the two middle values for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** The p-th percentile (0–100) by nearest rank. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

/** Least-squares slope of y over x. */
export function slope(xs: readonly number[], ys: readonly number[]): number {
  const n = xs.length;
  const meanX = xs.reduce((sum, x) => sum + x, 0) / n;
  const meanY = ys.reduce((sum, y) => sum + y, 0) / n;
  let numerator = 0;
  let denominator = 0;
  for (let i = 0; i < n; i++) {
    numerator += (xs[i]! - meanX) * (ys[i]! - meanY);
    denominator += (xs[i]! - meanX) ** 2;
  }
  return denominator === 0 ? 0 : numerator / denominator;
}

/** Nanoseconds elapsed since `start` (a `process.hrtime.bigint()`). */
export function nanosSince(start: bigint): number {
  return Number(process.hrtime.bigint() - start);
}

/** Runs `op` `count` times in sequence and answers the mean nanoseconds per call. */
export async function timeBatch(count: number, op: (i: number) => unknown): Promise<number> {
  const start = process.hrtime.bigint();
  for (let i = 0; i < count; i++) await op(i);
  return nanosSince(start) / count;
}

/**
 * A variant of an interleaved comparison: `batch()` runs one timed batch and answers its mean
 * nanoseconds per operation (it times itself, so a synchronous floor is not charged for
 * `await`s it would never do).
 */
export interface Variant {
  name: string;
  batch: () => Promise<number> | number;
}

/** Per variant, the ns/op of each round, in round order. */
export type RoundTimes = Record<string, number[]>;

/**
 * Runs `warmupRounds` untimed rounds, then `rounds` rounds in which every variant runs one batch,
 * the order rotating each round so that no variant always follows the same neighbour.
 */
export async function interleave(
  variants: readonly Variant[],
  { rounds, warmupRounds = 1 }: { rounds: number; warmupRounds?: number },
): Promise<RoundTimes> {
  const times: RoundTimes = Object.fromEntries(variants.map((variant) => [variant.name, [] as number[]]));
  for (let round = -warmupRounds; round < rounds; round++) {
    for (let i = 0; i < variants.length; i++) {
      const variant = variants[(i + Math.max(0, round)) % variants.length]!;
      const nsPerOp = await variant.batch();
      if (round >= 0) times[variant.name]!.push(nsPerOp);
    }
  }
  return times;
}

/** The median over rounds of `numerator / denominator` within each round. */
export function medianRatio(times: RoundTimes, numerator: string, denominator: string): number {
  const top = times[numerator];
  const bottom = times[denominator];
  if (!top || !bottom) throw new Error(`[bench] no times for ${!top ? numerator : denominator}`);
  return median(top.map((value, round) => value / bottom[round]!));
}

/** Spreads of a ratio across rounds, to show how noisy it was: [p25, p75]. */
export function ratioSpread(times: RoundTimes, numerator: string, denominator: string): [number, number] {
  const ratios = times[numerator]!.map((value, round) => value / times[denominator]![round]!);
  return [percentile(ratios, 25), percentile(ratios, 75)];
}
