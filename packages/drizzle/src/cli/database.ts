/**
 * Where the `idem` command line finds its database and tables: `--database` or `DATABASE_URL`
 * (the environment, else the `.env` of the folder), the tables the options or drizzle.config.ts
 * name, and the policy document an app publishes (`idem policy --url`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseEnv } from 'node:util';
import { asPublishedPolicy, renderPublishedPolicy, type PublishedPolicy } from './policy.js';
import { existingTables, pingDatabase } from './queries.js';
import { TABLE_PREFIX_ENV, type TableChoice, type TablePlan } from './tables.js';
import {
  DatabaseUrlError,
  describeDatabase,
  openDatabase,
  parseDatabaseUrl,
  type DatabaseLocation,
  type OpenedDatabase,
} from '../connect.js';
import { DEFAULT_TABLE_NAMES, type TableNames } from '../table-names.js';
import { usageError, failure, FETCH_TIMEOUT_MS, oneLine, type Target, type CliIo } from './options.js';

export const sameNames = (a: TableNames, b: TableNames) => a.keys === b.keys && a.history === b.history;
export const pair = ({ keys, history }: TableNames) => `${keys} and ${history}`;

/**
 * `migrate` creates the default-named tables only: tables under other names are the app's own
 * drizzle-kit migrations, and migrating beside them would make a second, unused pair.
 */
export function refuseOtherNames(plan: TablePlan): void {
  const other = plan.explicit
    ? plan.choices.find((choice) => !sameNames(choice.names, DEFAULT_TABLE_NAMES))
    : plan.declared.find((choice) => !sameNames(choice.names, DEFAULT_TABLE_NAMES));
  if (!other) return;
  const how = plan.explicit ? `named by ${other.source}` : `that ${other.source} defines`;
  throw usageError(
    `idem migrate creates only ${pair(DEFAULT_TABLE_NAMES)}; ${pair(other.names)}, ${how}, are created by your drizzle-kit migrations (drizzle-kit generate, then drizzle-kit migrate)${plan.explicit ? '' : '; pass --prefix "" to create the default-named tables anyway'}`,
  );
}

/** The first candidate pair of tables the database has; none is a failure that says what was looked for. */
export async function findTables(opened: OpenedDatabase, plan: TablePlan): Promise<TableNames> {
  const existing = await existingTables(
    opened,
    plan.choices.flatMap(({ names }) => [names.keys, names.history]),
  );
  const found = plan.choices.find(({ names }) => existing.has(names.keys) && existing.has(names.history));
  if (found) return found.names;
  const looked = plan.choices.map((choice: TableChoice) => {
    const half = [choice.names.keys, choice.names.history].find((name) => existing.has(name));
    return `${pair(choice.names)} (${choice.source}${half ? `; only ${half} exists` : ''})`;
  });
  const hint = plan.explicit
    ? 'check the names, or create the tables (idem migrate for the default names, drizzle-kit for your own)'
    : `pass --prefix <prefix> (or set ${TABLE_PREFIX_ENV}) if your schema gives them another prefix, or run idem migrate to create the default ones`;
  throw failure(`${opened.description} has no idem tables: looked for ${looked.join(', ')}; ${hint}`);
}

export function locate({ database: flag, driver }: Target, env: CliIo['env']): DatabaseLocation {
  const value = flag ?? env.DATABASE_URL;
  if (value === undefined || value.trim() === '')
    throw usageError(
      'set DATABASE_URL (in the environment or in .env) or pass --database (file:<path>, <path>.db, postgres://… or postgresql://…, mysql://…)',
    );
  try {
    return parseDatabaseUrl(value, { name: flag === undefined ? 'DATABASE_URL' : '--database', driver });
  } catch (error) {
    if (error instanceof DatabaseUrlError) throw usageError(error.message);
    throw error;
  }
}

/**
 * The environment, with what `<cwd>/.env` sets beneath it: the variables already set win, as with
 * dotenv, Next.js and drizzle-kit's configs, which read the same file (create-t3-app keeps
 * `DATABASE_URL` there). Parsed by Node's own `util.parseEnv`.
 */
export function withDotEnv(env: CliIo['env'], cwd: string): CliIo['env'] {
  let text: string;
  try {
    text = readFileSync(join(cwd, '.env'), 'utf8');
  } catch {
    return env;
  }
  const defined = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined));
  return { ...parseEnv(text), ...defined };
}

/** Opens the database and makes sure it answers, so that every later failure is about the work. */
export async function connect(location: DatabaseLocation, { create }: { create: boolean }): Promise<OpenedDatabase> {
  const description = describeDatabase(location);
  if (
    location.dialect === 'sqlite' &&
    'path' in location &&
    !create &&
    location.path !== ':memory:' &&
    !existsSync(resolve(location.path))
  ) {
    throw failure(`no SQLite database at ${resolve(location.path)}: run idem migrate first`);
  }
  let opened: OpenedDatabase;
  try {
    opened = await openDatabase(location, { create, max: 2 });
  } catch (error) {
    throw failure(`cannot open ${description}: ${oneLine(error)}`);
  }
  try {
    await pingDatabase(opened);
  } catch (error) {
    await opened.close().catch(() => {});
    throw failure(`cannot reach ${description}: ${oneLine(error)}`);
  }
  return opened;
}

/** `idem policy --url`: the document an app publishes (`createPolicyDocument`, R4). */
export async function publishedPolicy(url: string, json: boolean, io: CliIo): Promise<void> {
  const { document, policy } = await fetchPolicyDocument(url);
  io.stdout(`${json ? JSON.stringify(document, null, 2) : renderPublishedPolicy(url, policy)}\n`);
}

export const fetchPolicy = async (url: string) => (await fetchPolicyDocument(url)).policy;

export async function fetchPolicyDocument(url: string): Promise<{ document: unknown; policy: PublishedPolicy }> {
  let response: Response;
  try {
    response = await fetch(url, {
      headers: { accept: 'application/json' },
      signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
    });
  } catch (error) {
    throw failure(`cannot reach ${url}: ${oneLine(error)}`);
  }
  if (!response.ok) throw failure(`GET ${url} answered ${response.status} ${response.statusText}`.trimEnd());
  let document: unknown;
  try {
    document = await response.json();
  } catch {
    throw failure(`${url} did not answer with JSON (content-type ${response.headers.get('content-type') ?? 'none'})`);
  }
  const policy = asPublishedPolicy(document);
  if (!policy) throw failure(`${url} did not answer with a policy document (JSON with an "endpoints" list)`);
  return { document, policy };
}
