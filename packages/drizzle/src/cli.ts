/**
 * The `idem` command line (bin of `@idem/drizzle`): argument parsing, dispatch and the
 * one-line error contract. Exit status 0 when done, 1 when the work failed (database
 * unreachable, key not found, a query failed), 2 for bad usage. Errors are one line on
 * stderr, `idem: <reason>`, never a stack trace.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { isIdempotencyError, parseIdempotencyKey, toMilliseconds } from '@idem/core';
import { explainJson, renderExplain, type KeyTimelines } from './cli-explain.js';
import { plural } from './cli-format.js';
import { asPublishedPolicy, databasePolicyJson, renderDatabasePolicy, renderPublishedPolicy } from './cli-policy.js';
import { databaseNow, findScopes, pingDatabase, scopeFigures } from './cli-queries.js';
import {
  DatabaseUrlError,
  describeDatabase,
  openDatabase,
  parseDatabaseUrl,
  POSTGRES_DRIVERS,
  SQLITE_DRIVERS,
  type DatabaseLocation,
  type DriverName,
  type OpenedDatabase,
} from './connect.js';
import { createDrizzleStore, sweepAll } from './drizzle-store.js';
import { migrate } from './migrate.js';

export const USAGE = `Usage: idem <command> [options]

Maintains the idem store of @idem/drizzle in the database named by DATABASE_URL (or --database):
file:<path>, <path>.db or <path>.sqlite for SQLite (better-sqlite3, else libsql); libsql://… for
a remote libsql database; postgres://… or postgresql://… for PostgreSQL (pg, else postgres-js);
mysql://… for MySQL (mysql2).

Commands:
  migrate                        create or update the store's tables (safe to run again)
  sweep [--batch-size N]         archive records whose retention has passed, N per statement (default 1000) (R3)
  purge --older-than <duration>  delete records archived longer ago than <duration>, e.g. 90d, 24h (R3)
  explain <key> [--scope S]      print every generation of a key: first seen, completed, status, expiry,
          [--json]               archiving, reuse; without --scope, in every scope that holds it (A1);
                                 the key bare or as the header sends it ('"8e03978e-…"')
  policy [--json]                retention, lease, record counts and ages per scope, as the database shows them
  policy --url <url> [--json]    the retention policy an app publishes (R4), fetched from <url>
  help                           this text

Options:
  --database <url>  the database, instead of DATABASE_URL
  --driver <name>   node-postgres, postgres-js, better-sqlite3, libsql or mysql2, instead of the first installed
  -h, --help        this text

Exit status: 0 done; 1 failed (database unreachable, key not found, query failed); 2 bad usage.
`;

/** A failure with its exit status: 2 for bad usage, 1 for everything else. */
class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: 1 | 2,
  ) {
    super(message);
  }
}

const usageError = (message: string) => new CliError(message, 2);
const failure = (message: string) => new CliError(message, 1);

const OPTIONS = {
  database: { type: 'string' },
  driver: { type: 'string' },
  'batch-size': { type: 'string' },
  'older-than': { type: 'string' },
  scope: { type: 'string' },
  json: { type: 'boolean' },
  url: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type OptionName = keyof typeof OPTIONS;
type CommandName = 'migrate' | 'sweep' | 'purge' | 'explain' | 'policy' | 'help';

/** The options each command accepts besides `--database` and `--help`, and its arguments. */
const COMMANDS: Record<CommandName, { options: OptionName[]; argument?: string }> = {
  migrate: { options: [] },
  sweep: { options: ['batch-size'] },
  purge: { options: ['older-than'] },
  explain: { options: ['scope', 'json'], argument: 'key' },
  policy: { options: ['json', 'url'] },
  help: { options: [] },
};

const DEFAULT_BATCH_SIZE = 1000;
const MAX_BATCH_SIZE = 1_000_000;
const FETCH_TIMEOUT_MS = 10_000;

/** Where the database is: `--database` (or DATABASE_URL) and `--driver`. */
interface Target {
  database: string | undefined;
  driver: DriverName | undefined;
}

type Invocation =
  | { command: 'help' }
  | ({ command: 'migrate' } & Target)
  | ({ command: 'sweep'; batchSize: number } & Target)
  | ({ command: 'purge'; olderThanMs: number; olderThan: string } & Target)
  | ({ command: 'explain'; key: string; scope: string | undefined; json: boolean } & Target)
  | ({ command: 'policy'; url: string | undefined; json: boolean } & Target);

/** Where the CLI writes, and the environment it reads (`DATABASE_URL`). */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  env: Record<string, string | undefined>;
}

const processIo: CliIo = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
  env: process.env,
};

/** Runs `idem <argv…>` and answers the exit status; every error is reported as one line. */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  try {
    const invocation = parseInvocation(argv);
    if (invocation.command === 'help') {
      io.stdout(USAGE);
      return 0;
    }
    await execute(invocation, io);
    return 0;
  } catch (error) {
    const exitCode = error instanceof CliError ? error.exitCode : 1;
    io.stderr(`idem: ${error instanceof CliError ? error.message : oneLine(error)}\n`);
    return exitCode;
  }
}

/** Parses the arguments into one command with validated values; throws usage errors (exit 2). */
export function parseInvocation(argv: readonly string[]): Invocation {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true, tokens: true });
  } catch (error) {
    throw usageError(parseArgsMessage(error));
  }
  const { values, positionals, tokens } = parsed;
  if (values.help) return { command: 'help' };
  const [name, ...rest] = positionals;
  if (name === undefined)
    throw usageError('missing command: migrate, sweep, purge, explain or policy (idem --help shows how)');
  if (!Object.hasOwn(COMMANDS, name))
    throw usageError(`unknown command "${name}": use migrate, sweep, purge, explain or policy (idem --help shows how)`);
  const command = name as CommandName;
  const spec = COMMANDS[command];
  for (const token of tokens) {
    if (token.kind !== 'option' || token.name === 'database' || token.name === 'driver' || token.name === 'help')
      continue;
    if (!spec.options.includes(token.name as OptionName))
      throw usageError(`${token.rawName} does not apply to ${command} (idem --help shows how)`);
  }
  if (spec.argument === undefined && rest.length > 0)
    throw usageError(`${command} takes no arguments, got "${rest[0]}"`);
  const database = values.database;
  const driver = driverOf(values.driver);

  switch (command) {
    case 'help':
      return { command };
    case 'migrate':
      return { command, database, driver };
    case 'sweep':
      return { command, database, driver, batchSize: batchSizeOf(values['batch-size']) };
    case 'purge': {
      const olderThan = values['older-than'];
      if (olderThan === undefined) throw usageError('purge needs --older-than <duration>, e.g. --older-than 90d');
      return {
        command,
        database,
        driver,
        olderThanMs: durationOf('--older-than', olderThan),
        olderThan: olderThan.trim(),
      };
    }
    case 'explain': {
      const [key, ...extra] = rest;
      if (key === undefined || key === '')
        throw usageError('explain needs a key: idem explain <key> [--scope S] [--json]');
      if (extra.length > 0)
        throw usageError(`explain takes one key, got ${rest.length} arguments (quote a key that has spaces)`);
      if (values.scope !== undefined && values.scope === '') throw usageError('--scope needs a non-empty value');
      return { command, database, driver, key: keyOf(key), scope: values.scope, json: values.json === true };
    }
    case 'policy': {
      const url = values.url;
      if (url !== undefined && !isHttpUrl(url))
        throw usageError(`--url must be an http:// or https:// URL, got "${url}"`);
      return { command, database, driver, url, json: values.json === true };
    }
  }
}

/** The key as stored: a bare key, or the header's form (a quoted sf-string, `"…"`) as pasted from a request (K1). */
function keyOf(value: string): string {
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

function driverOf(value: string | undefined): DriverName | undefined {
  if (value === undefined) return undefined;
  const drivers: readonly string[] = [...POSTGRES_DRIVERS, ...SQLITE_DRIVERS, 'mysql2'];
  if (!drivers.includes(value)) throw usageError(`--driver must be one of ${drivers.join(', ')}, got "${value}"`);
  return value as DriverName;
}

function batchSizeOf(value: string | undefined): number {
  if (value === undefined) return DEFAULT_BATCH_SIZE;
  const n = /^\s*\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_BATCH_SIZE)
    throw usageError(`--batch-size must be a whole number from 1 to ${MAX_BATCH_SIZE}, got "${value}"`);
  return n;
}

function durationOf(option: string, value: string): number {
  try {
    return toMilliseconds(value);
  } catch {
    throw usageError(`${option} must be a duration such as 90d, 24h or 30m, got "${value}"`);
  }
}

function isHttpUrl(value: string): boolean {
  try {
    const { protocol } = new URL(value);
    return protocol === 'http:' || protocol === 'https:';
  } catch {
    return false;
  }
}

/** node:util's parse errors, as one short line. */
function parseArgsMessage(error: unknown): string {
  const { code, message } = error as { code?: string; message?: string };
  const option = /'(-[^' ]+)/.exec(message ?? '')?.[1];
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option) return `unknown option ${option} (idem --help lists them)`;
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && option) {
    if (/does not take/.test(message ?? '')) return `${option} takes no value`;
    if (/ambiguous/.test(message ?? ''))
      return `${option} needs a value (write ${option}=<value> for a value that starts with -)`;
    return `${option} needs a value`;
  }
  return firstSentence(message ?? String(error));
}

async function execute(invocation: Exclude<Invocation, { command: 'help' }>, io: CliIo): Promise<void> {
  if (invocation.command === 'policy' && invocation.url !== undefined) {
    await publishedPolicy(invocation.url, invocation.json, io);
    return;
  }
  const location = locate(invocation, io.env);
  const opened = await connect(location, { create: invocation.command === 'migrate' });
  try {
    await run(invocation, opened, io);
  } catch (error) {
    if (error instanceof CliError) throw error;
    if (isMissingTable(error)) throw failure(`${opened.description} has no idem tables: run idem migrate first`);
    throw failure(oneLine(error));
  } finally {
    await opened.close().catch(() => {});
  }
}

function locate({ database: flag, driver }: Target, env: CliIo['env']): DatabaseLocation {
  const value = flag ?? env.DATABASE_URL;
  if (value === undefined || value.trim() === '')
    throw usageError('set DATABASE_URL or pass --database (file:<path>, <path>.db, postgres://…, mysql://…)');
  try {
    return parseDatabaseUrl(value, { name: flag === undefined ? 'DATABASE_URL' : '--database', driver });
  } catch (error) {
    if (error instanceof DatabaseUrlError) throw usageError(error.message);
    throw error;
  }
}

/** Opens the database and makes sure it answers, so that every later failure is about the work. */
async function connect(location: DatabaseLocation, { create }: { create: boolean }): Promise<OpenedDatabase> {
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

async function run(
  invocation: Exclude<Invocation, { command: 'help' }>,
  opened: OpenedDatabase,
  io: CliIo,
): Promise<void> {
  switch (invocation.command) {
    case 'migrate': {
      await migrate(opened.db);
      io.stdout(`migrated ${opened.description}\n`);
      return;
    }
    case 'sweep': {
      const { archived } = await sweepAll(createDrizzleStore(opened.db), { batchSize: invocation.batchSize });
      io.stdout(`archived ${plural(archived, 'expired record')}\n`);
      return;
    }
    case 'purge': {
      const { deleted } = await createDrizzleStore(opened.db).purge({ olderThanMs: invocation.olderThanMs });
      io.stdout(`deleted ${plural(deleted, 'archived record')} older than ${invocation.olderThan}\n`);
      return;
    }
    case 'explain': {
      const { key, scope, json } = invocation;
      const store = createDrizzleStore(opened.db);
      const scopes = scope === undefined ? await findScopes(opened, key) : [scope];
      const timelines: KeyTimelines = { key, scopes: [] };
      for (const each of scopes) {
        const generations = await store.timeline(each, key);
        if (generations.length > 0) timelines.scopes.push({ scope: each, generations });
      }
      if (timelines.scopes.length === 0) {
        if (scope === undefined) throw failure(`no record of key ${JSON.stringify(key)}`);
        const elsewhere = await findScopes(opened, key);
        const hint =
          elsewhere.length > 0
            ? ` (it is recorded in scope ${elsewhere.map((s) => JSON.stringify(s)).join(', ')})`
            : '';
        throw failure(`no record of key ${JSON.stringify(key)} in scope ${JSON.stringify(scope)}${hint}`);
      }
      io.stdout(`${json ? explainJson(timelines) : renderExplain(timelines, await databaseNow(opened))}\n`);
      return;
    }
    case 'policy': {
      const now = await databaseNow(opened);
      const scopes = await scopeFigures(opened);
      io.stdout(
        `${invocation.json ? databasePolicyJson(opened.description, now, scopes) : renderDatabasePolicy(opened.description, now, scopes)}\n`,
      );
      return;
    }
  }
}

/** `idem policy --url`: the document an app publishes (`createPolicyDocument`, R4). */
async function publishedPolicy(url: string, json: boolean, io: CliIo): Promise<void> {
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
  io.stdout(`${json ? JSON.stringify(document, null, 2) : renderPublishedPolicy(url, policy)}\n`);
}

/** The error and its causes, outermost first. */
function causes(error: unknown): unknown[] {
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

function isMissingTable(error: unknown): boolean {
  // PostgreSQL's undefined_table, MySQL's ER_NO_SUCH_TABLE, SQLite's message.
  return causes(error).some(
    (e) =>
      ['42P01', 'ER_NO_SUCH_TABLE'].includes(String((e as { code?: unknown }).code)) ||
      /no such table/i.test(String((e as Error).message)),
  );
}

/**
 * One line that says what went wrong: drizzle's "Failed query" wrapper gives way to its cause,
 * an empty message (Node's AggregateError on connect) to its inner errors or code, `[idem] ` goes.
 */
function oneLine(error: unknown): string {
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

function firstSentence(text: string): string {
  return text.split('\n')[0]!.replace(/\s+/g, ' ').trim();
}
