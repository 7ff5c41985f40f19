/**
 * `@idem/drizzle`: the idempotency store over drizzle, for PostgreSQL (node-postgres,
 * postgres-js, PGlite), SQLite (better-sqlite3, libsql) and MySQL (mysql2), with its tables,
 * migrations, sweeper and timeline.
 * `openDatabase` (a `DATABASE_URL` opened with its driver, as the `idem` CLI does) is on its
 * own entry, `@idem/drizzle/connect`, so this one imports no driver.
 */
export {
  createDrizzleStore,
  sweepAll,
  type DrizzleStore,
  type DrizzleStoreOptions,
  type DrizzleTransaction,
  type PurgeResult,
  type SweepAllOptions,
  type SweepAllResult,
} from './drizzle-store.js';
export {
  startSweeper,
  type BatchOptions,
  type BatchProgress,
  type BatchStop,
  type ExclusiveSweeper,
  type Sweeper,
  type SweeperOptions,
  type SweepRound,
} from './sweeper.js';
export { migrate, retryConcurrentDdl, type MigrateOptions } from './migrate.js';
export type { Dialect, DrizzleDatabase } from './dialect.js';
export { DEFAULT_TABLE_NAMES, type TableNames, type TableOptions } from './table-names.js';
export {
  definePgTables,
  idemKeys as pgIdemKeys,
  idemKeyHistory as pgIdemKeyHistory,
  type PgTables,
} from './pg/schema.js';
export {
  defineSqliteTables,
  idemKeys as sqliteIdemKeys,
  idemKeyHistory as sqliteIdemKeyHistory,
  type SqliteTables,
} from './sqlite/schema.js';
export {
  defineMysqlTables,
  idemKeys as mysqlIdemKeys,
  idemKeyHistory as mysqlIdemKeyHistory,
  type MysqlTables,
} from './mysql/schema.js';
export { StoreQueryError } from './query-errors.js';
export { retrySqliteBusy, isSqliteBusy, DEFAULT_BUSY_RETRY_MS } from './sqlite/busy.js';
