/**
 * Text rendering shared by the `idem` commands: aligned tables and ISO timestamps (spans are
 * `formatDuration` of `@idem/core`, the one duration format idem prints).
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

/** `1 record`, `2 records` (`pluralNoun` where adding `s` is wrong: `batches`). */
export function plural(count: number, noun: string, pluralNoun = `${noun}s`): string {
  return `${count} ${count === 1 ? noun : pluralNoun}`;
}
