/**
 * The `idem` command line (bin of `@idem/drizzle`): one table of commands, each with its options,
 * help text and an example; argument parsing; the one-line error contract. Exit status 0 when
 * done, 1 when the work failed (database unreachable, no idem tables, key not found, a query
 * failed), 2 for bad usage. Errors are one line on stderr, `idem: <reason>`, never a stack trace.
 *
 * `sweep` and `purge` exit 130 when Ctrl-C stopped them, `doctor` 1 when it has a finding.
 *
 * A new command is one more entry of `COMMANDS` (`commands.ts`); the options and the error
 * contract are in `options.ts`, the database and tables a command opens in `database.ts`.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { DRIZZLE_CONFIG_FILES, planTables, TABLE_PREFIX_ENV, TableOptionError, type TablePlan } from './tables.js';
import { DEFAULT_TABLE_NAMES } from '../table-names.js';
import {
  CliError,
  usageError,
  failure,
  OPTIONS,
  COMMON,
  stringOf,
  driverOf,
  oneLine,
  type OptionName,
  type OptionSpec,
  type Values,
  type Target,
  type CommandSpec,
  type CliIo,
} from './options.js';
import { refuseOtherNames, findTables, locate, withDotEnv, connect, publishedPolicy } from './database.js';
import { COMMANDS, COMMAND_NAMES, type CommandName } from './commands.js';

export type { CliIo };

const commandList = () => `${COMMAND_NAMES.slice(0, -1).join(', ')} or ${COMMAND_NAMES.at(-1)}`;

type ArgsOf<C extends CommandName> = ReturnType<(typeof COMMANDS)[C]['parse']>;

/** One command line, parsed: `help` (with a topic), `version`, or a command with its arguments. */
export type Invocation =
  | { command: 'help'; topic?: CommandName }
  | { command: 'version' }
  | { [C in CommandName]: { command: C } & ArgsOf<C> & Target }[CommandName];

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

/**
 * `idem --version`: this package's version (src/cli/ and dist/cli/ sit two folders below its
 * package.json); then, for bug reports, the drizzle-orm it loads and Node's.
 */
async function versionText(): Promise<string> {
  const own = packageVersion(new URL('../../package.json', import.meta.url)) ?? 'unknown';
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
