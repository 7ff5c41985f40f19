/**
 * Text rendering shared by the `idem` commands: aligned tables, ISO timestamps and
 * human-readable spans.
 */

/** `—` for a missing value, as every table of the CLI shows it. */
export const NONE = '—';

/** An instant as ISO 8601 UTC (`2026-11-30T09:00:00.000Z`), or `—`. */
export function iso(date: Date | null | undefined): string {
  return date ? date.toISOString() : NONE;
}

/**
 * Renders rows under headers, each column padded to its widest cell and separated by two
 * spaces; trailing spaces are trimmed.
 */
export function renderTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((header, column) =>
    Math.max(header.length, ...rows.map((row) => (row[column] ?? '').length)),
  );
  const line = (cells: readonly string[]) =>
    widths
      .map((width, column) => (cells[column] ?? '').padEnd(width))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

const SPANS = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['m', 60_000],
] as const;

/** A span as a person says it: `3d 4h`, `2h 5m`, `12.5s`, `250ms` (two largest units, rounded down). */
export function humanizeSpan(ms: number): string {
  const rounded = Math.max(0, Math.round(ms));
  if (rounded < 1000) return `${rounded}ms`;
  if (rounded < 60_000) return `${Number((rounded / 1000).toFixed(1))}s`;
  const parts: string[] = [];
  let rest = rounded;
  for (const [unit, size] of SPANS) {
    const amount = Math.floor(rest / size);
    rest -= amount * size;
    if (amount > 0 || parts.length > 0) parts.push(`${amount}${unit}`);
    if (parts.length === 2) break;
  }
  if (parts.length < 2) parts.push(`${Math.floor(rest / 1000)}s`);
  return parts.filter((part, index) => index === 0 || !/^0[a-z]+$/.test(part)).join(' ');
}

/** `1 record`, `2 records`. */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}
