import { toMilliseconds } from '@idem/core';
import { DatabaseUrlError, parseDatabaseUrl as parseStoreDatabaseUrl, type DatabaseLocation } from '@idem/drizzle';
import { fileURLToPath } from 'node:url';

export interface ExampleConfig {
  port: number;
  /** The database: `sqlite` with a file path, or `postgres` with a connection URL. */
  database: DatabaseLocation;
  retentionMs: number;
  leaseMs: number;
  channelDelayMs: number;
}

/** Thrown for a bad environment variable; `main` prints its message on one line and exits 1. */
export class ConfigError extends Error {}

export const DEFAULT_SQLITE_PATH = fileURLToPath(new URL('../.data/payments.db', import.meta.url));

/**
 * Reads the example's configuration from the environment:
 * `PORT` (3000), `DATABASE_URL` (a SQLite file under examples/payments/.data/),
 * `IDEM_TTL` (24h), `IDEM_LEASE` (30s), `CHANNEL_DELAY_MS` (0).
 */
export function readConfig(env: NodeJS.ProcessEnv = process.env): ExampleConfig {
  return {
    port: integer('PORT', env.PORT, 3000, { min: 0, max: 65535 }),
    database: parseDatabaseUrl(env.DATABASE_URL),
    retentionMs: duration('IDEM_TTL', env.IDEM_TTL, '24h'),
    leaseMs: duration('IDEM_LEASE', env.IDEM_LEASE, '30s'),
    channelDelayMs: integer('CHANNEL_DELAY_MS', env.CHANNEL_DELAY_MS, 0, { min: 0, max: 600_000 }),
  };
}

/**
 * `file:<path>` or a path ending in `.db`/`.sqlite` selects SQLite; `postgres://` or
 * `postgresql://` selects PostgreSQL; unset selects the default SQLite file. The rules are
 * `parseDatabaseUrl` of `@idem/drizzle` (the same as the `idem` CLI); a bad value is a ConfigError.
 */
export function parseDatabaseUrl(value: string | undefined): ExampleConfig['database'] {
  try {
    return parseStoreDatabaseUrl(value, { defaultSqlitePath: DEFAULT_SQLITE_PATH });
  } catch (error) {
    if (error instanceof DatabaseUrlError) throw new ConfigError(error.message);
    throw error;
  }
}

function integer(name: string, value: string | undefined, fallback: number, { min, max }: { min: number; max: number }): number {
  if (value === undefined || value.trim() === '') return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) throw new ConfigError(`${name} must be an integer from ${min} to ${max}, got "${value}"`);
  return n;
}

function duration(name: string, value: string | undefined, fallback: string): number {
  try {
    return toMilliseconds(value === undefined || value.trim() === '' ? fallback : value.trim());
  } catch {
    throw new ConfigError(`${name} must be a duration such as 2s, 30m, 24h or 7d, got "${value}"`);
  }
}
