/**
 * SQLite's row readers: the live row with the database clock, selected in the table's column
 * order and taken as arrays (`values()`), mapped by position (`drizzle-seams.ts`). Stepped to
 * SQLITE_DONE, which lets the WAL auto-checkpoint run (`get()` resets a statement at its first row).
 */
import { getTableColumns, sql } from 'drizzle-orm';
import { sqliteClock as clock } from '../database-clock.js';
import { assertLiveReadOrder, liveRowOfValues, nowOfValues } from '../drizzle-seams.js';
import type { LiveRead } from '../record-rows.js';
import type { SqliteTables } from './schema.js';

/** The live row's columns and the clock, as one selection. */
export function liveSelectionOf(keys: SqliteTables['keys']) {
  const selection = { ...getTableColumns(keys), now: sql`${clock.now}`.mapWith(keys.createdAt) };
  assertLiveReadOrder(selection);
  return selection;
}

/** The first row of a live read taken as arrays, or undefined. */
export function liveReadOf(rows: ArrayLike<unknown>[]): LiveRead | undefined {
  return rows[0] ? { row: liveRowOfValues(rows[0]), now: nowOfValues(rows[0]) } : undefined;
}
