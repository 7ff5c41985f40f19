/** Names of the two tables a store uses. */
export interface TableNames {
  /** The live table: one row per (scope, key). Defaults to `idem_keys`. */
  keys: string;
  /** The history table: earlier generations of reused keys. Defaults to `idem_key_history`. */
  history: string;
}

/** The names the committed migrations create. */
export const DEFAULT_TABLE_NAMES: TableNames = { keys: 'idem_keys', history: 'idem_key_history' };
