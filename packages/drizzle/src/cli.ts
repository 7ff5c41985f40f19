/**
 * The `idem` command line (bin of `@idem/drizzle`): one table of commands, each with its options,
 * help text and an example; argument parsing; the one-line error contract. Exit status 0 when
 * done, 1 when the work failed (database unreachable, no idem tables, key not found, a query
 * failed), 2 for bad usage. Errors are one line on stderr, `idem: <reason>`, never a stack trace.
 *
 * `sweep` and `purge` exit 130 when Ctrl-C stopped them, `doctor` 1 when it has a finding.
 *
 * A new command is one more entry of {@link COMMANDS}: its options (declared in
 * {@link OPTIONS}), how it parses them, whether it reads the store's tables, and what it runs.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs, parseEnv } from 'node:util';
import { isIdempotencyError, parseIdempotencyKey, toMilliseconds } from '@idem/core';
import { explainJson, renderExplain, type KeyTimelines } from './cli-explain.js';
import { plural } from './cli-format.js';
import { progressReporter } from './cli-progress.js';
import { diagnose, doctorJson, renderDoctor, renderStats, statsJson } from './cli-doctor.js';
import { EstimateUnavailableError, readStats, type CountsMode } from './cli-health.js';
import {
  asPublishedPolicy,
  databasePolicyJson,
  renderDatabasePolicy,
  renderPublishedPolicy,
  type PublishedPolicy,
} from './cli-policy.js';
import { databaseNow, existingTables, findScopes, pingDatabase, scopeFigures } from './cli-queries.js';
import {
  DRIZZLE_CONFIG_FILES,
  planTables,
  TABLE_PREFIX_ENV,
  TableOptionError,
  type TableChoice,
  type TableFlags,
  type TablePlan,
} from './cli-tables.js';
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
import { createDrizzleStore } from './drizzle-store.js';
import { migrate } from './migrate.js';
import { DEFAULT_TABLE_NAMES, type TableNames } from './table-names.js';

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

interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  /** How the value is shown in help, e.g. `<url>`. */
  value?: string;
  help: string;
}

/** Every option, with its help line. `COMMON` ones apply to every command. */
const OPTIONS = {
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

type OptionName = keyof typeof OPTIONS;
const COMMON: readonly OptionName[] = ['database', 'driver', 'prefix', 'keys-table', 'history-table', 'config', 'help'];

/** The parsed options of one command line: strings and booleans, by option name. */
type Values = Partial<Record<OptionName, string | boolean>>;

/** Where the database is (`--database` or DATABASE_URL, `--driver`) and which tables to use. */
interface Target {
  database: string | undefined;
  driver: DriverName | undefined;
  tables: TableFlags;
}

/** What a command's `run` gets: the database, opened, and the tables found in it. */
interface CommandContext {
  opened: OpenedDatabase;
  tables: TableNames;
  io: CliIo;
  /** Aborted by Ctrl-C (SIGINT): long work stops after its current batch. */
  signal: AbortSignal;
}

interface CommandSpec<A extends object> {
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

const command = <A extends object>(spec: CommandSpec<A>): CommandSpec<A> => spec;

/** The commands, in the order the usage lists them. */
const COMMANDS = {
  migrate: command({
    synopsis: 'migrate',
    summary: "create or update the store's tables (safe to run again)",
    description:
      'Applies the committed migrations of idem_keys and idem_key_history (the default names), recorded in __idem_migrations. Tables under a prefix of yours (definePgTables({ prefix })) belong to your drizzle-kit migrations instead: idem migrate refuses a prefix, and refuses to run when your drizzle.config.ts schema defines the tables under other names.',
    options: [],
    examples: ['DATABASE_URL=postgres://app@db:5432/app npx idem migrate'],
    tables: 'create',
    parse: (positionals) => noArguments('migrate', positionals),
    async run(_, { opened, io }) {
      await migrate(opened.db);
      io.stdout(`migrated ${opened.description}\n`);
    },
  }),
  sweep: command({
    synopsis: 'sweep [--batch-size N] [--json]',
    summary: 'archive records past their retention, N per statement (default 1000) (R3)',
    description:
      'Archives every record past its retention, in batches: the body is dropped, status, fingerprint and timestamps are kept, so `idem explain` can still tell the story. Run it on a schedule (cron, a systemd timer) or let the app run startSweeper. Only one process sweeps a pair of tables at a time (an advisory lock on PostgreSQL and MySQL, a lease row on SQLite): when another is sweeping, sweep says so and exits 0. On a terminal a progress line shows records archived, batches and rate; elsewhere one line every --log-every batches, then the total; with --json one object at the end. Ctrl-C stops after the current batch, prints how far it got and exits 130.',
    options: ['batch-size', 'log-every', 'json'],
    examples: ['npx idem sweep --batch-size 1000', 'npx idem sweep --json'],
    tables: 'find',
    parse: (positionals, values) => ({
      ...noArguments('sweep', positionals),
      batchSize: batchSizeOf(values['batch-size']),
      logEvery: logEveryOf(values['log-every']),
      json: values.json === true,
    }),
    async run({ batchSize, logEvery, json }, { opened, tables, io, signal }) {
      const progress = progressReporter(io, { verb: 'sweep', noun: 'records archived', every: logEvery, json });
      const round = await createDrizzleStore(opened.db, { tables })
        .sweepExclusive({ batchSize, signal, onBatch: progress.onBatch })
        .finally(progress.end);
      if (round.skipped) {
        io.stdout(
          json
            ? `${JSON.stringify({ command: 'sweep', skipped: true, archived: 0 })}\n`
            : 'skipped: another process is sweeping these tables now\n',
        );
        return;
      }
      const { archived, batches, elapsedMs, stopped } = round;
      const interrupted = stopped === 'signal';
      if (json)
        io.stdout(`${JSON.stringify({ command: 'sweep', skipped: false, archived, batches, elapsedMs, stopped })}\n`);
      else if (interrupted)
        io.stdout(
          `interrupted: archived ${plural(archived, 'expired record')} in ${plural(batches, 'batch', 'batches')} before Ctrl-C; run idem sweep again for the rest\n`,
        );
      else if (stopped === 'lost-lock')
        io.stdout(
          `archived ${plural(archived, 'expired record')}, then stopped: another process took the sweep lease over\n`,
        );
      else io.stdout(`archived ${plural(archived, 'expired record')}\n`);
      return interrupted ? INTERRUPTED : undefined;
    },
  }),
  purge: command({
    synopsis: 'purge --older-than <duration> [--json]',
    summary: 'delete records archived more than <duration> ago, e.g. 90d (R3)',
    description:
      'Deletes, for good, the records archived before the audit horizon: history rows first, then archived live rows, 5000 per statement. Choose a horizon longer than your reconciliation window. Progress, --json and Ctrl-C as for sweep.',
    options: ['older-than', 'log-every', 'json'],
    examples: ['npx idem purge --older-than 90d'],
    tables: 'find',
    parse(positionals, values) {
      noArguments('purge', positionals);
      const olderThan = stringOf(values['older-than']);
      if (olderThan === undefined) throw usageError('purge needs --older-than <duration>, e.g. --older-than 90d');
      return {
        olderThanMs: durationOf('--older-than', olderThan),
        olderThan: olderThan.trim(),
        logEvery: logEveryOf(values['log-every']),
        json: values.json === true,
      };
    },
    async run({ olderThanMs, olderThan, logEvery, json }, { opened, tables, io, signal }) {
      const progress = progressReporter(io, { verb: 'purge', noun: 'archived records deleted', every: logEvery, json });
      const { deleted, batches, elapsedMs, stopped } = await createDrizzleStore(opened.db, { tables })
        .purge({ olderThanMs, signal, onBatch: progress.onBatch })
        .finally(progress.end);
      const interrupted = stopped === 'signal';
      if (json)
        io.stdout(
          `${JSON.stringify({ command: 'purge', olderThan, olderThanMs, deleted, batches, elapsedMs, stopped })}\n`,
        );
      else if (interrupted)
        io.stdout(
          `interrupted: deleted ${plural(deleted, 'archived record')} older than ${olderThan} in ${plural(batches, 'batch', 'batches')} before Ctrl-C; run idem purge again for the rest\n`,
        );
      else io.stdout(`deleted ${plural(deleted, 'archived record')} older than ${olderThan}\n`);
      return interrupted ? INTERRUPTED : undefined;
    },
  }),
  explain: command({
    synopsis: 'explain <key> [--scope S] [--json]',
    summary: 'every generation of a key: first seen, completed, status, expiry, reuse, waits (A1)',
    description:
      'Prints, per scope, one row per generation of the key (with the duplicates that waited for its outcome, E3w) and, when it ran more than once, how it came back. Without --scope it looks in every scope that holds the key (reading the tables by key alone). The key bare or as the header sends it (\'"8e03978e-…"\'). Stored bodies are never printed (K5).',
    options: ['scope', 'json'],
    examples: [
      'npx idem explain order-42',
      "npx idem explain '\"8e03978e-40d5-43e8-bc93-6894a57f9324\"' --scope 'payments.create|acct_1' --json",
    ],
    tables: 'find',
    parse(positionals, values) {
      const [key, ...extra] = positionals;
      if (key === undefined || key === '')
        throw usageError('explain needs a key: idem explain <key> [--scope S] [--json]');
      if (extra.length > 0)
        throw usageError(`explain takes one key, got ${positionals.length} arguments (quote a key that has spaces)`);
      const scope = stringOf(values.scope);
      if (scope === '') throw usageError('--scope needs a non-empty value');
      return { key: keyOf(key), scope, json: values.json === true };
    },
    async run({ key, scope, json }, { opened, tables, io }) {
      const store = createDrizzleStore(opened.db, { tables });
      const scopes = scope === undefined ? await findScopes(opened, tables, key) : [scope];
      const timelines: KeyTimelines = { key, scopes: [] };
      for (const each of scopes) {
        const generations = await store.timeline(each, key);
        if (generations.length > 0) timelines.scopes.push({ scope: each, generations });
      }
      if (timelines.scopes.length === 0) {
        if (scope === undefined) throw failure(`no record of key ${JSON.stringify(key)}`);
        const elsewhere = await findScopes(opened, tables, key);
        const hint =
          elsewhere.length > 0
            ? ` (it is recorded in scope ${elsewhere.map((s) => JSON.stringify(s)).join(', ')})`
            : '';
        throw failure(`no record of key ${JSON.stringify(key)} in scope ${JSON.stringify(scope)}${hint}`);
      }
      io.stdout(`${json ? explainJson(timelines) : renderExplain(timelines, await databaseNow(opened))}\n`);
    },
  }),
  policy: command({
    synopsis: 'policy [--url <url>] [--json]',
    summary: 'retention, lease and counts per scope as stored; with --url, the policy an app publishes (R4)',
    description:
      "Without --url: per scope, the retention and lease of its newest record, counts by state, records past their retention not swept yet, and how far back `idem explain` reaches, as the database shows them (the CLI never sees the app's configuration). With --url: fetches the policy document the app publishes (Accept: application/json) and prints its endpoints.",
    options: ['json', 'url'],
    examples: ['npx idem policy', 'npx idem policy --url https://api.example.com/idempotency'],
    tables: 'find',
    parse(positionals, values) {
      noArguments('policy', positionals);
      const url = stringOf(values.url);
      if (url !== undefined && !isHttpUrl(url))
        throw usageError(`--url must be an http:// or https:// URL, got "${url}"`);
      return { url, json: values.json === true };
    },
    async run({ json }, { opened, tables, io }) {
      const now = await databaseNow(opened);
      const scopes = await scopeFigures(opened, tables);
      io.stdout(
        `${json ? databasePolicyJson(opened.description, now, scopes) : renderDatabasePolicy(opened.description, now, scopes)}\n`,
      );
    },
  }),
  stats: command({
    synopsis: 'stats [--exact | --estimate] [--json]',
    summary: 'records per state and per operation, stuck claims, takeovers, expired not swept, history',
    description:
      "Counts the live records per state and per operation (the scope after its principal), shows the oldest processing claim and whether its lease has passed, the takeovers of the last day, the records past their retention not swept yet (and since when), the archived records and the history rows. Each figure is one statement through an index; docs/drizzle.md (What stats and doctor read) shows each one's plan on PostgreSQL. The counts by state and operation: on PostgreSQL, above 1,000,000 rows (the planner's estimate), from the planner statistics without reading the table (--exact counts every row instead, --estimate uses the statistics on any table); on SQLite and MySQL, counted.",
    options: ['exact', 'estimate', 'json'],
    examples: ['npx idem stats', 'npx idem stats --json', 'npx idem stats --exact'],
    tables: 'find',
    parse: (positionals, values) => {
      if (values.exact === true && values.estimate === true)
        throw usageError('stats: --exact and --estimate exclude each other: pick one');
      const counts: CountsMode = values.exact === true ? 'exact' : values.estimate === true ? 'estimate' : 'auto';
      return { ...noArguments('stats', positionals), json: values.json === true, counts };
    },
    async run({ json, counts }, { opened, tables, io }) {
      const now = await databaseNow(opened);
      let stats;
      try {
        stats = await readStats(opened, tables, counts);
      } catch (error) {
        if (error instanceof EstimateUnavailableError)
          throw (error.usage ? usageError : failure)(`stats: ${error.message}`);
        throw error;
      }
      io.stdout(`${json ? statsJson(opened.description, now, stats) : renderStats(opened.description, now, stats)}\n`);
    },
  }),
  doctor: command({
    synopsis: 'doctor [--url <url>] [--sweep-lag <duration>] [--json]',
    summary: 'check the store: migrations and expiry index, clock skew, retention vs lease, stuck claims, sweeping',
    description:
      "Checks, and names each finding with what to do: every migration applied and the expiry index present (the sweeper reads through it); the clock of this machine against the database's (more than 2 s apart: fix NTP; expiry is judged by the database clock, R1); with --url, endpoints of the published policy whose retention is shorter than their lease (R1); processing claims past their lease (E6); the oldest expired record not swept for longer than --sweep-lag (R3). Exits 1 when there is a finding, 0 when none.",
    options: ['url', 'sweep-lag', 'json'],
    examples: ['npx idem doctor', 'npx idem doctor --url https://api.example.com/idempotency --sweep-lag 30m'],
    tables: 'find',
    parse(positionals, values) {
      noArguments('doctor', positionals);
      const url = stringOf(values.url);
      if (url !== undefined && !isHttpUrl(url))
        throw usageError(`--url must be an http:// or https:// URL, got "${url}"`);
      const lag = stringOf(values['sweep-lag']);
      return {
        url,
        sweepLagMs: lag === undefined ? DEFAULT_SWEEP_LAG_MS : durationOf('--sweep-lag', lag),
        json: values.json === true,
      };
    },
    async run({ url, sweepLagMs, json }, { opened, tables, io }) {
      const policy = url === undefined ? undefined : await fetchPolicy(url);
      const findings = await diagnose(opened, tables, { policy, sweepLagMs });
      io.stdout(`${json ? doctorJson(opened.description, findings) : renderDoctor(opened.description, findings)}\n`);
      return findings.some((each) => !each.ok) ? 1 : undefined;
    },
  }),
} satisfies Record<string, CommandSpec<object>>;

type CommandName = keyof typeof COMMANDS;
const COMMAND_NAMES = Object.keys(COMMANDS) as CommandName[];

type ArgsOf<C extends CommandName> = ReturnType<(typeof COMMANDS)[C]['parse']>;

/** One command line, parsed: `help` (with a topic), `version`, or a command with its arguments. */
export type Invocation =
  | { command: 'help'; topic?: CommandName }
  | { command: 'version' }
  | { [C in CommandName]: { command: C } & ArgsOf<C> & Target }[CommandName];

const DEFAULT_BATCH_SIZE = 1000;
const DEFAULT_LOG_EVERY = 100;
/** The exit status of work stopped by Ctrl-C, as shells report a SIGINT (128 + 2). */
const INTERRUPTED = 130;
const MAX_BATCH_SIZE = 1_000_000;
const FETCH_TIMEOUT_MS = 10_000;
const DEFAULT_SWEEP_LAG_MS = 3_600_000;

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

const processIo: CliIo = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
  env: process.env,
  isTTY: process.stderr.isTTY === true,
  onInterrupt(stop) {
    process.on('SIGINT', stop);
    return () => void process.off('SIGINT', stop);
  },
};

/** Runs `idem <argv…>` and answers the exit status; every error is reported as one line. */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  try {
    const invocation = parseInvocation(argv);
    if (invocation.command === 'help') io.stdout(invocation.topic ? commandHelp(invocation.topic) : usage());
    else if (invocation.command === 'version') io.stdout(await versionText());
    else return await execute(invocation, io);
    return 0;
  } catch (error) {
    const exitCode = error instanceof CliError ? error.exitCode : 1;
    io.stderr(`idem: ${error instanceof CliError ? error.message : oneLine(error)}\n`);
    return exitCode;
  }
}

const isCommand = (name: string | undefined): name is CommandName =>
  name !== undefined && Object.hasOwn(COMMANDS, name);

/** Parses the arguments into one command with validated values; throws usage errors (exit 2). */
export function parseInvocation(argv: readonly string[]): Invocation {
  const { values, positionals } = parseOptions(argv);
  const [name, ...rest] = positionals;
  if (name === 'help') {
    const [topic, ...extra] = rest;
    if (extra.length > 0) throw usageError(`help takes one command, got ${rest.length}`);
    if (topic === undefined) return { command: 'help' };
    if (!isCommand(topic)) throw usageError(`unknown command "${topic}": use ${commandList()} (idem --help shows how)`);
    return { command: 'help', topic };
  }
  if (values.help === true) return isCommand(name) ? { command: 'help', topic: name } : { command: 'help' };
  if (values.version === true) return { command: 'version' };
  if (name === undefined) throw usageError(`missing command: ${commandList()} (idem --help shows how)`);
  if (!isCommand(name)) throw usageError(`unknown command "${name}": use ${commandList()} (idem --help shows how)`);
  const spec: CommandSpec<object> = COMMANDS[name];
  for (const option of Object.keys(values) as OptionName[]) {
    if (!COMMON.includes(option) && !spec.options.includes(option))
      throw usageError(`--${option} does not apply to ${name} (idem help ${name} shows how)`);
  }
  const target: Target = {
    database: stringOf(values.database),
    driver: driverOf(stringOf(values.driver)),
    tables: {
      prefix: stringOf(values.prefix),
      keys: stringOf(values['keys-table']),
      history: stringOf(values['history-table']),
      config: stringOf(values.config),
    },
  };
  return { command: name, ...spec.parse(rest, values), ...target } as Invocation;
}

/**
 * node:util's parser without its strict mode, whose errors carry only a message: each option
 * token is checked here instead, by name and by what the token holds.
 */
function parseOptions(argv: readonly string[]): { values: Values; positionals: string[] } {
  const { tokens } = parseArgs({
    args: [...argv],
    options: OPTIONS,
    allowPositionals: true,
    strict: false,
    tokens: true,
  });
  const values: Values = {};
  const positionals: string[] = [];
  for (const token of tokens) {
    if (token.kind === 'positional') positionals.push(token.value);
    if (token.kind !== 'option') continue;
    if (!Object.hasOwn(OPTIONS, token.name))
      throw usageError(`unknown option ${token.rawName} (idem --help lists them)`);
    const name = token.name as OptionName;
    const spec: OptionSpec = OPTIONS[name];
    if (spec.type === 'boolean') {
      if (token.value !== undefined) throw usageError(`${token.rawName} takes no value`);
      values[name] = true;
      continue;
    }
    if (token.value === undefined) throw usageError(`${token.rawName} needs a value`);
    // `--scope -x`: the parser takes the next argument, whatever it is; only `--scope=-x` says it is meant.
    if (!token.inlineValue && token.value.startsWith('-'))
      throw usageError(
        `${token.rawName} needs a value (write ${token.rawName}=<value> for a value that starts with -)`,
      );
    values[name] = token.value;
  }
  return { values, positionals };
}

const stringOf = (value: string | boolean | undefined): string | undefined =>
  typeof value === 'string' ? value : undefined;

const commandList = () => `${COMMAND_NAMES.slice(0, -1).join(', ')} or ${COMMAND_NAMES.at(-1)}`;

/** Refuses positionals; answers no arguments. */
function noArguments(name: string, positionals: readonly string[]): Record<never, never> {
  if (positionals.length > 0) throw usageError(`${name} takes no arguments, got "${positionals[0]}"`);
  return {};
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

function batchSizeOf(value: string | boolean | undefined): number {
  if (typeof value !== 'string') return DEFAULT_BATCH_SIZE;
  const n = /^\s*\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_BATCH_SIZE)
    throw usageError(`--batch-size must be a whole number from 1 to ${MAX_BATCH_SIZE}, got "${value}"`);
  return n;
}

function logEveryOf(value: string | boolean | undefined): number {
  if (typeof value !== 'string') return DEFAULT_LOG_EVERY;
  const n = /^\s*\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < 1)
    throw usageError(`--log-every must be a whole number of batches from 1, got "${value}"`);
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

// ---------------------------------------------------------------------------------------------
// Help and version

/** `  left  right`, the right column wrapped under itself; a left cell too wide puts it on the next line. */
function columns(left: string, right: string, width: number): string {
  const indent = ' '.repeat(width + 3);
  const wrapped = wrap(right, 100 - indent.length)
    .split('\n')
    .join(`\n${indent}`);
  return left.length <= width ? `  ${left.padEnd(width)} ${wrapped}` : `  ${left}\n${indent}${wrapped}`;
}

const optionLine = (name: OptionName) => {
  const spec: OptionSpec = OPTIONS[name];
  return columns(
    `${spec.short ? `-${spec.short}, ` : ''}--${name}${spec.value ? ` ${spec.value}` : ''}`,
    spec.help,
    24,
  );
};

/** `idem --help`: every command and the options they share. */
export function usage(): string {
  const commands = COMMAND_NAMES.map((name) => columns(COMMANDS[name].synopsis, COMMANDS[name].summary, 30));
  return `Usage: idem <command> [options]

Maintains the idem store of @idem/drizzle in the database named by DATABASE_URL (the environment,
else the .env of this folder) or --database:
file:<path>, <path>.db or <path>.sqlite for SQLite (better-sqlite3, else libsql); libsql://… for
a remote libsql database; postgres://… or postgresql://… for PostgreSQL (pg, else postgres-js);
mysql://… for MySQL (mysql2).

Commands:
${commands.join('\n')}
${columns('help [<command>]', "this text, or one command's, with examples", 30)}

Options of every command:
${[...COMMON, 'version' as const].map(optionLine).join('\n')}

Tables: idem_keys and idem_key_history unless --prefix (or --keys-table, --history-table) or
${TABLE_PREFIX_ENV} names others. Otherwise, when the folder has a drizzle-kit config
(${DRIZZLE_CONFIG_FILES[0]}, …), idem reads it as text and uses the first pair that exists in the
database: the tables its schema defines with definePgTables / defineSqliteTables /
defineMysqlTables, then those under each tablesFilter prefix ("app_*" → app_idem_keys), then the
default names.

Exit status: 0 done; 1 failed (database unreachable, no idem tables, key not found, query failed,
a doctor finding); 130 sweep or purge stopped by Ctrl-C; 2 bad usage.
`;
}

/** `idem help <command>`: its synopsis, what it does, its options and its examples. */
export function commandHelp(name: CommandName): string {
  const spec: CommandSpec<object> = COMMANDS[name];
  const options = spec.options.map(optionLine);
  return `Usage: idem ${spec.synopsis} [options]

${spec.summary[0]!.toUpperCase()}${spec.summary.slice(1)}.

${wrap(spec.description)}
${options.length > 0 ? `\nOptions:\n${options.join('\n')}\n` : ''}
Options of every command: --database, --driver, --prefix, --keys-table, --history-table, --config
(idem --help).

${spec.examples.length === 1 ? 'Example' : 'Examples'}:
${spec.examples.map((example) => `  ${example}`).join('\n')}
`;
}

function wrap(text: string, width = 96): string {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/)) {
    if (line !== '' && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  if (line !== '') lines.push(line);
  return lines.join('\n');
}

function packageVersion(url: URL): string | undefined {
  try {
    return (JSON.parse(readFileSync(url, 'utf8')) as { version?: string }).version;
  } catch {
    return undefined;
  }
}

/** `idem --version`: this package's version; then, for bug reports, the drizzle-orm it loads and Node's. */
async function versionText(): Promise<string> {
  const own = packageVersion(new URL('../package.json', import.meta.url)) ?? 'unknown';
  const drizzle = await import('drizzle-orm/version').then(
    (module: { npmVersion?: unknown }) => String(module.npmVersion),
    () => 'not found',
  );
  return `${own}\n@idem/drizzle ${own}, drizzle-orm ${drizzle}, Node.js ${process.versions.node}\n`;
}

// ---------------------------------------------------------------------------------------------
// Running a command

type CommandInvocation = Exclude<Invocation, { command: 'help' } | { command: 'version' }>;

async function execute(invocation: CommandInvocation, io: CliIo): Promise<number> {
  const spec: CommandSpec<object> = COMMANDS[invocation.command];
  if (invocation.command === 'policy' && invocation.url !== undefined) {
    await publishedPolicy(invocation.url, invocation.json, io);
    return 0;
  }
  const cwd = io.cwd ?? process.cwd();
  const env = withDotEnv(io.env, cwd);
  let plan: TablePlan;
  try {
    plan = planTables(invocation.tables, env, cwd);
  } catch (error) {
    if (error instanceof TableOptionError) throw usageError(error.message);
    throw error;
  }
  if (spec.tables === 'create') refuseOtherNames(plan);
  const location = locate(invocation, env);
  const opened = await connect(location, { create: spec.tables === 'create' });
  const interrupt = new AbortController();
  const forget = io.onInterrupt?.(() => interrupt.abort());
  try {
    const tables = spec.tables === 'find' ? await findTables(opened, plan) : DEFAULT_TABLE_NAMES;
    const code = await spec.run(invocation, { opened, tables, io, signal: interrupt.signal });
    return typeof code === 'number' ? code : 0;
  } catch (error) {
    if (error instanceof CliError) throw error;
    throw failure(oneLine(error));
  } finally {
    forget?.();
    await opened.close().catch(() => {});
  }
}

const sameNames = (a: TableNames, b: TableNames) => a.keys === b.keys && a.history === b.history;
const pair = ({ keys, history }: TableNames) => `${keys} and ${history}`;

/**
 * `migrate` creates the default-named tables only: tables under other names are the app's own
 * drizzle-kit migrations, and migrating beside them would make a second, unused pair.
 */
function refuseOtherNames(plan: TablePlan): void {
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
async function findTables(opened: OpenedDatabase, plan: TablePlan): Promise<TableNames> {
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

function locate({ database: flag, driver }: Target, env: CliIo['env']): DatabaseLocation {
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

/** `idem policy --url`: the document an app publishes (`createPolicyDocument`, R4). */
async function publishedPolicy(url: string, json: boolean, io: CliIo): Promise<void> {
  const { document, policy } = await fetchPolicyDocument(url);
  io.stdout(`${json ? JSON.stringify(document, null, 2) : renderPublishedPolicy(url, policy)}\n`);
}

const fetchPolicy = async (url: string) => (await fetchPolicyDocument(url)).policy;

async function fetchPolicyDocument(url: string): Promise<{ document: unknown; policy: PublishedPolicy }> {
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
