/**
 * Which tables the `idem` commands read: the names an app gave `definePgTables` & co. The CLI
 * takes them, in this order, from `--prefix` / `--keys-table` / `--history-table`, from
 * `IDEM_TABLE_PREFIX`, and otherwise from the app's drizzle-kit config when there is one: the
 * idem tables its schema files define, then the prefixes of its `tablesFilter` (create-t3-app's
 * `["<app>_*"]`), then the default names. The config is read as text, never run: a name computed
 * at run time is not seen, and `--prefix` says it instead.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { DEFAULT_TABLE_NAMES, resolveTableNames, type TableNames } from '../table-names.js';

/** The environment variable that gives the prefix when `--prefix` does not. */
export const TABLE_PREFIX_ENV = 'IDEM_TABLE_PREFIX';

/** The config files drizzle-kit looks for, in its order. */
export const DRIZZLE_CONFIG_FILES = [
  'drizzle.config.ts',
  'drizzle.config.mts',
  'drizzle.config.cts',
  'drizzle.config.js',
  'drizzle.config.mjs',
  'drizzle.config.cjs',
  'drizzle.config.json',
] as const;

/** One pair of table names the CLI may use, and where it got them (for messages). */
export interface TableChoice {
  names: TableNames;
  /** e.g. `--prefix "app_"`, `tablesFilter "app_*" in drizzle.config.ts`, `the default names`. */
  source: string;
}

/** What the command line says about the tables. */
export interface TableFlags {
  prefix?: string | undefined;
  keys?: string | undefined;
  history?: string | undefined;
  /** `--config`: the drizzle-kit config to read instead of the one in the working directory. */
  config?: string | undefined;
}

/**
 * The candidates, in the order the CLI tries them. `explicit`: named by a flag or the environment
 * (only that pair is tried). `declared`: the pairs the schema files define (what drizzle-kit
 * creates), which `idem migrate` must not duplicate under the default names.
 */
export interface TablePlan {
  explicit: boolean;
  choices: TableChoice[];
  declared: TableChoice[];
}

/** A flag or a config file the CLI cannot use: bad usage (exit 2). */
export class TableOptionError extends Error {}

const DEFAULT_CHOICE: TableChoice = { names: DEFAULT_TABLE_NAMES, source: 'the default names' };

export function planTables(flags: TableFlags, env: Record<string, string | undefined>, cwd: string): TablePlan {
  const named = flags.keys !== undefined || flags.history !== undefined;
  if (flags.prefix !== undefined || named) {
    const parts = [
      flags.prefix !== undefined ? `--prefix ${JSON.stringify(flags.prefix)}` : undefined,
      flags.keys !== undefined ? `--keys-table ${JSON.stringify(flags.keys)}` : undefined,
      flags.history !== undefined ? `--history-table ${JSON.stringify(flags.history)}` : undefined,
    ].filter((part) => part !== undefined);
    const choice = { names: namesOf(flags), source: parts.join(' ') };
    return { explicit: true, choices: [choice], declared: [] };
  }
  const fromEnv = env[TABLE_PREFIX_ENV];
  if (fromEnv !== undefined) {
    const choice = { names: namesOf({ prefix: fromEnv }), source: `${TABLE_PREFIX_ENV}=${JSON.stringify(fromEnv)}` };
    return { explicit: true, choices: [choice], declared: [] };
  }
  const config = findConfig(flags.config, cwd);
  if (config === undefined) return { explicit: false, choices: [DEFAULT_CHOICE], declared: [] };
  const text = readFileSync(config, 'utf8');
  const shown = relative(cwd, config) || config;
  const declared = schemaFiles(text, dirname(config)).flatMap((file) =>
    declaredTables(readFileSync(file, 'utf8')).map((names) => ({
      names,
      source: `${relative(cwd, file) || file}`,
    })),
  );
  const filtered = tablesFilterPrefixes(text).map((prefix) => ({
    names: namesOf({ prefix }),
    source: `tablesFilter "${prefix}*" in ${shown}`,
  }));
  return { explicit: false, choices: unique([...declared, ...filtered, DEFAULT_CHOICE]), declared: unique(declared) };
}

function namesOf(options: { prefix?: string | undefined; keys?: string | undefined; history?: string | undefined }) {
  for (const [flag, value] of [
    ['--keys-table', options.keys],
    ['--history-table', options.history],
  ] as const) {
    if (value === '') throw new TableOptionError(`${flag} needs a non-empty table name`);
  }
  try {
    return resolveTableNames({
      ...(options.prefix !== undefined && { prefix: options.prefix }),
      ...(options.keys !== undefined && { keys: options.keys }),
      ...(options.history !== undefined && { history: options.history }),
    });
  } catch (error) {
    throw new TableOptionError((error as Error).message.replace(/^\[idem\]\s*/, ''));
  }
}

function unique(choices: TableChoice[]): TableChoice[] {
  const seen = new Set<string>();
  return choices.filter(({ names }) => {
    const id = `${names.keys}\u0000${names.history}`;
    if (seen.has(id)) return false;
    seen.add(id);
    return true;
  });
}

function findConfig(flag: string | undefined, cwd: string): string | undefined {
  if (flag !== undefined) {
    const path = resolve(cwd, flag);
    if (!existsSync(path) || !statSync(path).isFile()) throw new TableOptionError(`--config: no file at ${path}`);
    return path;
  }
  return DRIZZLE_CONFIG_FILES.map((name) => join(cwd, name)).find((path) => existsSync(path));
}

/**
 * Reads the string literal that starts at `text[at]` (a quote): its value, with escapes resolved,
 * and where it ends; undefined when `text[at]` is no quote, or for a template with `${…}` inside.
 */
function literalAt(text: string, at: number): { value: string | undefined; end: number } | undefined {
  const quote = text[at];
  if (quote !== '"' && quote !== "'" && quote !== '`') return undefined;
  let value = '';
  let interpolated = false;
  for (let i = at + 1; i < text.length; i++) {
    const c = text[i]!;
    if (c === '\\') {
      value += text[++i] ?? '';
      continue;
    }
    if (c === quote) return { value: interpolated ? undefined : value, end: i + 1 };
    if (quote === '`' && c === '$' && text[i + 1] === '{') interpolated = true;
    value += c;
  }
  return undefined;
}

const skipSpace = (text: string, at: number) => {
  while (at < text.length && /\s/.test(text[at]!)) at++;
  return at;
};

/**
 * The value of the first `name:` property in `text` (a key bare or quoted, as in TypeScript or
 * JSON): one string literal, or an array of them. Anything else (a variable, a call) is not read.
 */
function propertyStrings(text: string, name: string): string[] {
  const key = new RegExp(String.raw`(?:^|[{,\s])["']?${name}["']?\s*:`, 'm').exec(text);
  if (!key) return [];
  let at = skipSpace(text, key.index + key[0].length);
  const single = literalAt(text, at);
  if (single) return single.value === undefined ? [] : [single.value];
  if (text[at] !== '[') return [];
  const values: string[] = [];
  for (at = skipSpace(text, at + 1); at < text.length; at = skipSpace(text, at)) {
    if (text[at] === ']') return values;
    if (text[at] === ',') {
      at++;
      continue;
    }
    const item = literalAt(text, at);
    if (!item) return values;
    if (item.value !== undefined) values.push(item.value);
    at = item.end;
  }
  return values;
}

/** The prefixes of `tablesFilter` patterns of the form `<prefix>*` (negations and other globs are skipped). */
export function tablesFilterPrefixes(configText: string): string[] {
  return propertyStrings(configText, 'tablesFilter')
    .filter((pattern) => /^[^*?[\]{}()!]+\*$/.test(pattern))
    .map((pattern) => pattern.slice(0, -1));
}

/** The schema files a config names, that exist: files, and the `.ts`/`.js` files directly inside a folder. */
function schemaFiles(configText: string, base: string): string[] {
  const files: string[] = [];
  for (const entry of propertyStrings(configText, 'schema')) {
    if (/[*?[\]{}]/.test(entry)) continue;
    const path = resolve(base, entry);
    if (!existsSync(path)) continue;
    if (statSync(path).isFile()) files.push(path);
    else if (statSync(path).isDirectory())
      for (const name of readdirSync(path).sort())
        if (/\.[mc]?[jt]s$/.test(name) && statSync(join(path, name)).isFile()) files.push(join(path, name));
  }
  return files;
}

/**
 * The table names each `definePgTables({ … })` / `defineSqliteTables` / `defineMysqlTables` call
 * of a schema file gives, when its options are literals (`prefix`, `keys`, `history`).
 */
export function declaredTables(schemaText: string): TableNames[] {
  const found: TableNames[] = [];
  for (const call of schemaText.matchAll(/\bdefine(?:Pg|Sqlite|Mysql)Tables\s*\(\s*(\{[^}]*\})?\s*\)/g)) {
    const body = call[1] ?? '{}';
    const options: Record<string, string> = {};
    for (const name of ['prefix', 'keys', 'history'] as const) {
      const [value] = propertyStrings(body, name);
      if (value !== undefined) options[name] = value;
    }
    // Every property must be one of the three, as a literal: otherwise the names are not known here.
    const properties = body
      .slice(1, -1)
      .split(',')
      .filter((part) => part.trim() !== '').length;
    if (properties !== Object.keys(options).length) continue;
    try {
      found.push(resolveTableNames(options));
    } catch {
      // Two equal names: the app's own schema fails on it, not the CLI.
    }
  }
  return found;
}
