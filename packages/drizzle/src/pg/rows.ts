/** PostgreSQL's row reader: the rows of a `db.execute`, whichever driver answered. */

/** The rows of `db.execute` (node-postgres and PGlite: `{ rows }`; postgres-js: an array). */
export function pgExecutedRows(result: unknown): Array<Record<string, unknown>> {
  if (Array.isArray(result)) return result as Array<Record<string, unknown>>;
  return (result as { rows?: Array<Record<string, unknown>> }).rows ?? [];
}
