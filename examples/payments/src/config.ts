import { idempotencyCors } from '@idem/core/http';
import { toMilliseconds } from '@idem/core';
import {
  DatabaseUrlError,
  parseDatabaseUrl as parseStoreDatabaseUrl,
  type DatabaseLocation,
  type DriverName,
} from '@idem/drizzle/connect';
import { isAbsolute, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Semantics } from './channel.ts';

export interface ExampleConfig {
  port: number;
  /** The database: `sqlite` with a file path, or `postgres` with a connection URL. */
  database: DatabaseLocation;
  retentionMs: number;
  leaseMs: number;
  /** E3w (`IDEM_WAIT`, off): how long a duplicate waits for the outcome in progress before 409; 0 for not at all. */
  waitMs: number;
  channelDelayMs: number;
  /** Atomic mode (PostgreSQL only): the ledger row commits in the transaction of the claim and the outcome. */
  atomic: boolean;
  /** The largest request body on /trpc, /graphql and /v1/payments, in bytes; larger ones get 413. */
  maxBodyBytes: number;
  /** Origins allowed to call the API from a browser (CORS); empty: none but the API's own. */
  corsOrigins: string[];
  /** The port of the checkout page's own server (another origin than the API); undefined: not served. */
  checkoutPort: number | undefined;
  /** The API URL the checkout page calls; undefined: `http://localhost:<PORT>`. */
  checkoutApiUrl: string | undefined;
  /** The token that opens `/admin/…` (a key's timeline); undefined: the admin pages do not exist (404). */
  adminToken: string | undefined;
  /** How often the in-process sweeper archives expired keys (R3); undefined: it does not run (`IDEM_SWEEPER=off`). */
  sweepEveryMs: number | undefined;
  /** Group commit in the store (`IDEM_GROUP_COMMIT`, on): claims and completions that arrive together go as one statement. */
  groupCommit: boolean;
  /**
   * `IDEM_SEMANTICS` (v1): what a failure after the start becomes on the three payment endpoints.
   * `v1` (Stripe v1, `onFailure: 'replay'`): stored and replayed to every retry (E4). `v2` (Stripe
   * v2, `onFailure: 'resume'`): a 5xx is resumable, a retry with the same key completes the
   * payment, skipping the steps done (E8).
   */
  semantics: Semantics;
}

/** The values `IDEM_SEMANTICS` accepts, and the `onFailure` each selects. */
export const SEMANTICS: Readonly<Record<Semantics, 'replay' | 'resume'>> = { v1: 'replay', v2: 'resume' };

/** A payment is a few dozen bytes: a body near this is not one. */
export const DEFAULT_MAX_BODY_BYTES = 64 * 1024;

/** Thrown for a bad environment variable; `main` prints its message on one line and exits 1. */
export class ConfigError extends Error {}

export const DEFAULT_SQLITE_PATH = fileURLToPath(new URL('../.data/payments.db', import.meta.url));

/**
 * Reads the example's configuration from the environment:
 * `PORT` (3000), `DATABASE_URL` (a SQLite file under examples/payments/.data/), `DATABASE_DRIVER`
 * (the first installed driver of the URL's dialect),
 * `IDEM_TTL` (24h; 30d with `IDEM_SEMANTICS=v2`), `IDEM_LEASE` (30s), `IDEM_WAIT` (off), `CHANNEL_DELAY_MS` (0), `IDEM_ATOMIC` (off; PostgreSQL only in the example, which opens SQLite with better-sqlite3),
 * `MAX_BODY_BYTES` (65536), `CORS_ORIGIN` (none), `CHECKOUT_PORT` (off), `CHECKOUT_API_URL`,
 * `ADMIN_TOKEN` (off), `IDEM_SWEEPER` (on), `IDEM_SWEEP_EVERY` (5m), `IDEM_GROUP_COMMIT` (on),
 * `IDEM_SEMANTICS` (v1).
 */
export function readConfig(env: NodeJS.ProcessEnv = process.env): ExampleConfig {
  const database = resolveFrom(parseDatabaseUrl(env.DATABASE_URL, env.DATABASE_DRIVER), env.INIT_CWD);
  const atomic = flag('IDEM_ATOMIC', env.IDEM_ATOMIC);
  if (atomic && database.dialect !== 'postgres') {
    throw new ConfigError(
      "IDEM_ATOMIC needs PostgreSQL here: the example opens SQLite with better-sqlite3, whose transactions cannot span the resolvers' awaits (libsql can: docs/drizzle.md#drivers)",
    );
  }
  const waitMs = flagOrDuration('IDEM_WAIT', env.IDEM_WAIT);
  if (atomic && waitMs > 0) {
    throw new ConfigError(
      "IDEM_WAIT cannot be combined with IDEM_ATOMIC: in atomic mode the first request's claim is invisible until its transaction commits, so a duplicate has no outcome in progress to wait for (it gets 409 at once). Unset one of them.",
    );
  }
  const chosen = semantics('IDEM_SEMANTICS', env.IDEM_SEMANTICS);
  return {
    port: integer('PORT', env.PORT, 3000, { min: 0, max: 65535 }),
    database,
    // idem's defaults: a resumable failure may be retried for longer than a replayed outcome is kept.
    retentionMs: duration('IDEM_TTL', env.IDEM_TTL, chosen === 'v2' ? '30d' : '24h'),
    leaseMs: duration('IDEM_LEASE', env.IDEM_LEASE, '30s'),
    waitMs,
    channelDelayMs: integer('CHANNEL_DELAY_MS', env.CHANNEL_DELAY_MS, 0, { min: 0, max: 600_000 }),
    atomic,
    maxBodyBytes: integer('MAX_BODY_BYTES', env.MAX_BODY_BYTES, DEFAULT_MAX_BODY_BYTES, {
      min: 1,
      max: 100 * 1024 * 1024,
    }),
    corsOrigins: origins('CORS_ORIGIN', env.CORS_ORIGIN),
    checkoutPort:
      env.CHECKOUT_PORT === undefined || env.CHECKOUT_PORT.trim() === ''
        ? undefined
        : integer('CHECKOUT_PORT', env.CHECKOUT_PORT, 0, { min: 0, max: 65535 }),
    checkoutApiUrl: apiUrl('CHECKOUT_API_URL', env.CHECKOUT_API_URL),
    adminToken: env.ADMIN_TOKEN === undefined || env.ADMIN_TOKEN.trim() === '' ? undefined : env.ADMIN_TOKEN.trim(),
    sweepEveryMs: flag('IDEM_SWEEPER', env.IDEM_SWEEPER, true)
      ? duration('IDEM_SWEEP_EVERY', env.IDEM_SWEEP_EVERY, '5m')
      : undefined,
    groupCommit: flag('IDEM_GROUP_COMMIT', env.IDEM_GROUP_COMMIT, true),
    semantics: chosen,
  };
}

function semantics(name: string, value: string | undefined): Semantics {
  const normalized = value?.trim().toLowerCase() ?? '';
  if (normalized === '') return 'v1';
  if (normalized === 'v1' || normalized === 'v2') return normalized;
  throw new ConfigError(
    `${name} must be v1 (a failure after the start is stored and replayed, Stripe v1) or v2 (a 5xx after the start is resumed by a retry with the same key, Stripe v2), got "${value}"`,
  );
}

/** A comma-separated list of origins (`http://localhost:3001,https://shop.example.com`), checked as idempotencyCors checks them. */
function origins(name: string, value: string | undefined): string[] {
  const list = (value ?? '')
    .split(',')
    .map((each) => each.trim())
    .filter(Boolean);
  if (list.length === 0) return [];
  try {
    idempotencyCors({ origin: list });
  } catch (error) {
    throw new ConfigError(
      `${name} must be a comma-separated list of origins such as http://localhost:3001: ${(error as Error).message.replace('[idem] idempotencyCors: ', '')}`,
    );
  }
  return list;
}

function apiUrl(name: string, value: string | undefined): string | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  try {
    const url = new URL(value.trim());
    if (url.protocol === 'http:' || url.protocol === 'https:') return url.href.replace(/\/$/, '');
  } catch {}
  throw new ConfigError(`${name} must be an http(s) URL such as http://localhost:3000, got "${value}"`);
}

/**
 * A relative SQLite path is taken from where the user ran `npm start` (npm's `INIT_CWD`), not
 * from the example's folder, where npm runs the script.
 */
function resolveFrom(database: DatabaseLocation, initCwd: string | undefined): DatabaseLocation {
  if (
    database.dialect !== 'sqlite' ||
    !('path' in database) ||
    !initCwd ||
    database.path === ':memory:' ||
    isAbsolute(database.path)
  )
    return database;
  return { ...database, path: resolve(initCwd, database.path) };
}

function flag(name: string, value: string | undefined, fallback = false): boolean {
  const normalized = value?.trim().toLowerCase() ?? '';
  if (normalized === '') return fallback;
  if (['0', 'false', 'off', 'no'].includes(normalized)) return false;
  if (['1', 'true', 'on', 'yes'].includes(normalized)) return true;
  throw new ConfigError(`${name} must be 1/true/on or 0/false/off, got "${value}"`);
}

/**
 * `file:<path>` or a path ending in `.db`/`.sqlite` selects SQLite; `postgres://` or
 * `postgresql://` selects PostgreSQL; unset selects the default SQLite file. The rules are
 * `parseDatabaseUrl` of `@idem/drizzle` (the same as the `idem` CLI); a bad value is a ConfigError.
 */
export function parseDatabaseUrl(value: string | undefined, driver?: string): ExampleConfig['database'] {
  let database: DatabaseLocation;
  try {
    database = parseStoreDatabaseUrl(value, {
      defaultSqlitePath: DEFAULT_SQLITE_PATH,
      name: 'DATABASE_URL',
      driver: driver === undefined || driver.trim() === '' ? undefined : (driver.trim() as DriverName),
    });
  } catch (error) {
    if (error instanceof DatabaseUrlError) throw new ConfigError(error.message);
    throw error;
  }
  // The store runs on MySQL too, but this example's ledger (channel.ts) speaks SQLite and PostgreSQL only.
  if (database.dialect === 'mysql')
    throw new ConfigError(`DATABASE_URL "${value?.trim()}" is MySQL: this example runs on SQLite or PostgreSQL`);
  return database;
}

function integer(
  name: string,
  value: string | undefined,
  fallback: number,
  { min, max }: { min: number; max: number },
): number {
  if (value === undefined || value.trim() === '') return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new ConfigError(`${name} must be an integer from ${min} to ${max}, got "${value}"`);
  return n;
}

/** A duration, or off (unset, empty, `0`, `off`, `false`, `no`): 0. */
function flagOrDuration(name: string, value: string | undefined): number {
  const normalized = value?.trim().toLowerCase() ?? '';
  if (['', '0', 'off', 'false', 'no'].includes(normalized)) return 0;
  try {
    return toMilliseconds(normalized);
  } catch {
    throw new ConfigError(`${name} must be a duration such as 500ms, 5s or 1m, or off; got "${value}"`);
  }
}

function duration(name: string, value: string | undefined, fallback: string): number {
  try {
    return toMilliseconds(value === undefined || value.trim() === '' ? fallback : value.trim());
  } catch {
    throw new ConfigError(`${name} must be a duration such as 2s, 30m, 24h or 7d, got "${value}"`);
  }
}
