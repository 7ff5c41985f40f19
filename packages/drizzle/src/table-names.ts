/** Names of the two tables a store uses. */
export interface TableNames {
  /** The live table: one row per (scope, key). Defaults to `idem_keys`. */
  keys: string;
  /** The history table: earlier generations of reused keys. Defaults to `idem_key_history`. */
  history: string;
}

/** The names the committed migrations create. */
export const DEFAULT_TABLE_NAMES: TableNames = { keys: 'idem_keys', history: 'idem_key_history' };

/** Which tables: other names, a prefix for the names, or both. */
export interface TableOptions extends Partial<TableNames> {
  /**
   * Put before each table name (and so before its index names): `'t3app_'` gives
   * `t3app_idem_keys` and `t3app_idem_key_history`, which drizzle-kit's
   * `tablesFilter: ['t3app_*']` includes (create-t3-app names its filter after the app,
   * `['<app>_*']`). Defaults to none.
   */
  prefix?: string;
}

/** The table names `options` selects. */
export function resolveTableNames({
  prefix = '',
  keys = DEFAULT_TABLE_NAMES.keys,
  history = DEFAULT_TABLE_NAMES.history,
}: TableOptions = {}): TableNames {
  const names = { keys: `${prefix}${keys}`, history: `${prefix}${history}` };
  if (names.keys === names.history)
    throw new TypeError(`[idem] the live and history tables need different names, got "${names.keys}" for both`);
  return names;
}
