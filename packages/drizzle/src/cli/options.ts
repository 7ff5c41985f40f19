import { isIdempotencyError, parseIdempotencyKey, toMilliseconds } from '@idem/core';
import { TABLE_PREFIX_ENV, type TableFlags } from './tables.js';
import { POSTGRES_DRIVERS, SQLITE_DRIVERS, type DriverName, type OpenedDatabase } from '../connect.js';
import type { TableNames } from '../table-names.js';

/** A failure with its exit status: 2 for bad usage, 1 for everything else. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: 1 | 2,
  ) {
    super(message);
  }
}

export const usageError = (message: string) => new CliError(message, 2);
export const failure = (message: string) => new CliError(message, 1);

export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  /** How the value is shown in help, e.g. `<url>`. */
  value?: string;
  help: string;
}

/** Every option, with its help line. `COMMON` ones apply to every command. */
export const OPTIONS = {
  database: { type: 'string', value: '<url>', help: 'the database, instead of DATABASE_URL' },
  driver: {
    type: 'string',
    value: '<name>',
    help: 'node-postgres, postgres-js, better-sqlite3, libsql or mysql2, instead of the first one installed',
  },
  prefix: {
    type: 'string',
    value: '<prefix>',
    help: `the prefix your schema gives idem's tables (definePgTables({ prefix })), instead of ${TABLE_PREFIX_ENV} or drizzle.config.ts`,
  },
  'keys-table': { type: 'string', value: '<name>', help: 'the live table, if you renamed it (default idem_keys)' },
  'history-table': {
    type: 'string',
    value: '<name>',
    help: 'the history table, if you renamed it (default idem_key_history)',
  },
  config: {
    type: 'string',
    value: '<path>',
    help: 'the drizzle-kit config to read the tables from, instead of ./drizzle.config.ts',
  },
  help: { type: 'boolean', short: 'h', help: 'this text; after a command, that command' },
  version: { type: 'boolean', help: "idem's version, and the drizzle-orm it loads" },
  'batch-size': { type: 'string', value: '<n>', help: 'records archived per statement (default 1000)' },
  'log-every': {
    type: 'string',
    value: '<n>',
    help: 'off a terminal, a progress line every <n> batches (default 100); on a terminal the line is redrawn in place',
  },
  'older-than': { type: 'string', value: '<duration>', help: 'the audit horizon, e.g. 90d, 24h, 30m' },
  scope: { type: 'string', value: '<scope>', help: 'only this scope (faster on a large table)' },
  json: { type: 'boolean', help: 'print JSON instead of text' },
  exact: { type: 'boolean', help: 'stats: count every record by state and operation (a scan of the table)' },
  estimate: {
    type: 'boolean',
    help: "stats: read the counts from PostgreSQL's planner statistics, even on a small table (no scan)",
  },
  url: { type: 'string', value: '<url>', help: 'the policy URL an app publishes (http:// or https://)' },
  'sweep-lag': {
    type: 'string',
    value: '<duration>',
    help: 'doctor: how long a record may stay expired and unswept before sweeping counts as overdue (default 1h)',
  },
} as const satisfies Record<string, OptionSpec>;

export type OptionName = keyof typeof OPTIONS;
export const COMMON: readonly OptionName[] = [
  'database',
  'driver',
  'prefix',
  'keys-table',
  'history-table',
  'config',
  'help',
];

/** The parsed options of one command line: strings and booleans, by option name. */
export type Values = Partial<Record<OptionName, string | boolean>>;

/** Where the database is (`--database` or DATABASE_URL, `--driver`) and which tables to use. */
export interface Target {
  database: string | undefined;
  driver: DriverName | undefined;
  tables: TableFlags;
}

/** What a command's `run` gets: the database, opened, and the tables found in it. */
export interface CommandContext {
  opened: OpenedDatabase;
  tables: TableNames;
  io: CliIo;
  /** Aborted by Ctrl-C (SIGINT): long work stops after its current batch. */
  signal: AbortSignal;
}

export interface CommandSpec<A extends object> {
  /** As the usage shows it, after `idem `: `explain <key> [--scope S] [--json]`. */
  synopsis: string;
  /** One line for the command list. */
  summary: string;
  /** What `idem help <command>` says beyond the summary. */
  description: string;
  /** The options of this command besides the common ones. */
  options: readonly OptionName[];
  /** At least one: each a whole command line, as a user types it. */
  examples: readonly string[];
  /** `find`: the tables must exist; `create`: the command creates them; `none`: no database. */
  tables: 'find' | 'create' | 'none';
  /** Validates the positionals and values into the command's arguments; throws usage errors. */
  parse(positionals: readonly string[], values: Values): A;
  /** Resolves with the exit status when it is not 0 (130: interrupted by Ctrl-C), else with nothing. */
  run(args: A, context: CommandContext): Promise<unknown>;
}

export const DEFAULT_BATCH_SIZE = 1000;
export const DEFAULT_LOG_EVERY = 100;
/** The exit status of work stopped by Ctrl-C, as shells report a SIGINT (128 + 2). */
export const INTERRUPTED = 130;
export const MAX_BATCH_SIZE = 1_000_000;
export const FETCH_TIMEOUT_MS = 10_000;
export const DEFAULT_SWEEP_LAG_MS = 3_600_000;

/** Where the CLI writes, the environment it reads (`DATABASE_URL`, `IDEM_TABLE_PREFIX`) and the folder it runs in. */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  env: Record<string, string | undefined>;
  /** Where `drizzle.config.ts` is looked for. Defaults to the process's working directory. */
  cwd?: string;
  /** Whether stderr is a terminal (progress redrawn in place). Defaults to false. */
  isTTY?: boolean;
  /** Calls `stop` on Ctrl-C until the returned function is called. Defaults to never. */
  onInterrupt?(stop: () => void): () => void;
}

export const stringOf = (value: string | boolean | undefined): string | undefined =>
  typeof value === 'string' ? value : undefined;

/** Refuses positionals; answers no arguments. */
export function noArguments(name: string, positionals: readonly string[]): Record<never, never> {
  if (positionals.length > 0) throw usageError(`${name} takes no arguments, got "${positionals[0]}"`);
  return {};
}

/** The key as stored: a bare key, or the header's form (a quoted sf-string, `"…"`) as pasted from a request (K1). */
export function keyOf(value: string): string {
  let key: string | undefined;
  try {
    key = parseIdempotencyKey(value);
  } catch (error) {
    if (!isIdempotencyError(error)) throw error;
    throw usageError(`${JSON.stringify(value)} is not an Idempotency-Key: ${error.message}`);
  }
  if (key === undefined) throw usageError('explain needs a key: idem explain <key> [--scope S] [--json]');
  return key;
}

export function driverOf(value: string | undefined): DriverName | undefined {
  if (value === undefined) return undefined;
  const drivers: readonly string[] = [...POSTGRES_DRIVERS, ...SQLITE_DRIVERS, 'mysql2'];
  if (!drivers.includes(value)) throw usageError(`--driver must be one of ${drivers.join(', ')}, got "${value}"`);
  return value as DriverName;
}

export function batchSizeOf(value: string | boolean | undefined): number {
  if (typeof value !== 'string') return DEFAULT_BATCH_SIZE;
  const n = /^\s*\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_BATCH_SIZE)
    throw usageError(`--batch-size must be a whole number from 1 to ${MAX_BATCH_SIZE}, got "${value}"`);
  return n;
}

export function logEveryOf(value: string | boolean | undefined): number {
  if (typeof value !== 'string') return DEFAULT_LOG_EVERY;
  const n = /^\s*\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < 1)
    throw usageError(`--log-every must be a whole number of batches from 1, got "${value}"`);
  return n;
}

export function durationOf(option: string, value: string): number {
  try {
    return toMilliseconds(value);
  } catch {
    throw usageError(`${option} must be a duration such as 90d, 24h or 30m, got "${value}"`);
  }
}

export function isHttpUrl(value: string): boolean {
  try {
    const { protocol } = new URL(value);
    return protocol === 'http:' || protocol === 'https:';
  } catch {
    return false;
  }
}

/** The error and its causes, outermost first. */
export function causes(error: unknown): unknown[] {
  const chain: unknown[] = [];
  for (
    let current = error;
    current !== undefined && current !== null && chain.length < 8;
    current = (current as { cause?: unknown }).cause
  ) {
    chain.push(current);
  }
  return chain;
}

/**
 * One line that says what went wrong: drizzle's "Failed query" wrapper gives way to its cause,
 * an empty message (Node's AggregateError on connect) to its inner errors or code, `[idem] ` goes.
 */
export function oneLine(error: unknown): string {
  let message = '';
  for (const each of causes(error)) {
    const text = each instanceof Error ? each.message : String(each);
    const inner = (each as { errors?: unknown }).errors;
    const aggregated =
      text === '' && Array.isArray(inner)
        ? inner.map((e) => (e instanceof Error ? e.message : String(e))).join('; ')
        : '';
    const candidate = text || aggregated || String((each as { code?: unknown }).code ?? '');
    if (candidate === '') continue;
    message = candidate;
    // Wrappers whose own message is a query dump or a generic phrase: look at the cause.
    if (!/^Failed query:|^fetch failed$/.test(candidate)) break;
  }
  return firstSentence(message.replace(/^\[idem\]\s*/, '')) || 'unknown error';
}

export function firstSentence(text: string): string {
  return text.split('\n')[0]!.replace(/\s+/g, ' ').trim();
}
