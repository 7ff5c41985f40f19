/**
 * Which tables the `idem` commands read (src/cli/tables.ts): the flags, then IDEM_TABLE_PREFIX, then
 * the app's drizzle-kit config read as text — the tables its schema defines, the prefixes of its
 * tablesFilter, the default names. Checked against the names the store itself gives a prefix
 * (`resolveTableNames`, the oracle), for any prefix and any way of quoting it.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { declaredTables, planTables, tablesFilterPrefixes, TableOptionError } from '../src/cli/tables.ts';
import { DEFAULT_TABLE_NAMES } from '../src/index.ts';
import { resolveTableNames } from '../src/table-names.ts';

const folders: string[] = [];
afterAll(() => {
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

function appFolder(files: Record<string, string>): string {
  const folder = mkdtempSync(join(tmpdir(), 'idem-cli-plan-'));
  folders.push(folder);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(folder, path, '..'), { recursive: true });
    writeFileSync(join(folder, path), text);
  }
  return folder;
}

/** drizzle.config.ts as create-t3-app 7.40 writes it for an app named t3app (template drizzle-config-postgres.ts). */
const T3_CONFIG = `import { type Config } from "drizzle-kit";

import { env } from "~/env";

export default {
  schema: "./src/server/db/schema.ts",
  dialect: "postgresql",
  dbCredentials: {
    url: env.DATABASE_URL,
  },
  tablesFilter: ["t3app_*"],
} satisfies Config;
`;

const names = (prefix: string) => resolveTableNames({ prefix });

describe('the tables the CLI looks for', () => {
  it("reads create-t3-app's tablesFilter, then the default names", () => {
    expect(tablesFilterPrefixes(T3_CONFIG)).toEqual(['t3app_']);
    const plan = planTables({}, {}, appFolder({ 'drizzle.config.ts': T3_CONFIG }));
    expect(plan).toEqual({
      explicit: false,
      choices: [
        { names: names('t3app_'), source: 'tablesFilter "t3app_*" in drizzle.config.ts' },
        { names: DEFAULT_TABLE_NAMES, source: 'the default names' },
      ],
      declared: [],
    });
  });

  it('puts the tables the schema defines first, and leaves out what it cannot know from the text', () => {
    const folder = appFolder({
      'drizzle.config.ts': T3_CONFIG,
      'src/server/db/schema.ts': [
        "import { definePgTables } from '@idem/drizzle';",
        "export const { keys, history } = definePgTables({ prefix: 'shop_' });",
        'export const renamed = definePgTables({ keys: "k", history: "h" });',
        'export const computed = definePgTables({ prefix: PREFIX });',
        'export const both = definePgTables({ prefix: `x_`, keys: "live" });',
      ].join('\n'),
    });
    const plan = planTables({}, {}, folder);
    expect(plan.choices.map((choice) => choice.names)).toEqual([
      names('shop_'),
      { keys: 'k', history: 'h' },
      { keys: 'x_live', history: 'x_idem_key_history' },
      names('t3app_'),
      DEFAULT_TABLE_NAMES,
    ]);
    expect(plan.declared.map((choice) => choice.source)).toEqual([
      'src/server/db/schema.ts',
      'src/server/db/schema.ts',
      'src/server/db/schema.ts',
    ]);
  });

  it('skips negated and other glob patterns, templates with interpolations, and reads JSON configs and schema folders', () => {
    expect(
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's text holds a template literal
      tablesFilterPrefixes('export default { tablesFilter: ["a_*", "!b_*", "c?", "d_*_x", `${name}_*`, \'e_*\'] }'),
    ).toEqual(['a_', 'e_']);
    expect(tablesFilterPrefixes('export default { tablesFilter: "solo_*" }')).toEqual(['solo_']);
    expect(tablesFilterPrefixes('export default { tablesFilter: filters }')).toEqual([]);
    const folder = appFolder({
      'drizzle.config.json': JSON.stringify({ schema: ['./db', './missing.ts'], tablesFilter: ['j_*'] }),
      'db/a.ts': "defineSqliteTables({ prefix: 'a_' })",
      'db/b.mts': "defineSqliteTables({ prefix: 'b_' })",
      'db/notes.md': "defineSqliteTables({ prefix: 'md_' })",
    });
    expect(planTables({}, {}, folder).choices.map((choice) => choice.names.keys)).toEqual([
      'a_idem_keys',
      'b_idem_keys',
      'j_idem_keys',
      'idem_keys',
    ]);
    expect(declaredTables('definePgTables()')).toEqual([DEFAULT_TABLE_NAMES]);
  });

  it('flags win over IDEM_TABLE_PREFIX, which wins over the config; either is the only pair tried', () => {
    const folder = appFolder({ 'drizzle.config.ts': T3_CONFIG });
    const env = { IDEM_TABLE_PREFIX: 'env_' };
    expect(planTables({ prefix: 'flag_' }, env, folder)).toEqual({
      explicit: true,
      choices: [{ names: names('flag_'), source: '--prefix "flag_"' }],
      declared: [],
    });
    expect(planTables({}, env, folder).choices).toEqual([{ names: names('env_'), source: 'IDEM_TABLE_PREFIX="env_"' }]);
    expect(planTables({ prefix: '' }, env, folder).choices[0]!.names).toEqual(DEFAULT_TABLE_NAMES);
    expect(planTables({ keys: 'live' }, {}, folder).choices[0]).toEqual({
      names: { keys: 'live', history: 'idem_key_history' },
      source: '--keys-table "live"',
    });
    expect(planTables({}, {}, appFolder({})).choices).toEqual([
      { names: DEFAULT_TABLE_NAMES, source: 'the default names' },
    ]);
  });

  it('a missing --config, an empty name or two equal names are bad usage', () => {
    const folder = appFolder({});
    expect(() => planTables({ config: 'nope.ts' }, {}, folder)).toThrow(TableOptionError);
    expect(() => planTables({ config: 'nope.ts' }, {}, folder)).toThrow(/^--config: no file at .*nope\.ts$/);
    expect(() => planTables({ keys: '' }, {}, folder)).toThrow(/^--keys-table needs a non-empty table name$/);
    expect(() => planTables({ keys: 'same', history: 'same' }, {}, folder)).toThrow(
      /^the live and history tables need different names, got "same" for both$/,
    );
  });

  it('for any prefix, however the config quotes it, the CLI looks for the tables the store makes under it', () => {
    const chars = [...'abcXYZ09_-.$é😀 "\'`\\{}'];
    const prefix = fc
      .array(fc.constantFrom(...chars), { minLength: 1, maxLength: 12 })
      .map((parts) => parts.join(''))
      .filter((text) => !/[*?[\]{}()!]/.test(text));
    const quote = (text: string, mark: '"' | "'" | '`') =>
      `${mark}${text
        .replace(/\\/g, '\\\\')
        .replaceAll(mark, `\\${mark}`)
        .replace(mark === '`' ? /\$/g : /(?!)/g, '\\$')}${mark}`;
    fc.assert(
      fc.property(prefix, fc.constantFrom('"', "'", '`'), fc.boolean(), (value, mark, inSchema) => {
        const expected = resolveTableNames({ prefix: value });
        const config = `export default {\n  schema: "./schema.ts",\n  tablesFilter: [${quote(`${value}*`, mark)}],\n};\n`;
        expect(tablesFilterPrefixes(config)).toEqual([value]);
        const files: Record<string, string> = { 'drizzle.config.ts': config };
        if (inSchema) files['schema.ts'] = `export const t = definePgTables({ prefix: ${quote(value, mark)} });\n`;
        const plan = planTables({}, {}, appFolder(files));
        expect(plan.choices[0]!.names).toEqual(expected);
        expect(plan.declared.map((choice) => choice.names)).toEqual(inSchema ? [expected] : []);
      }),
      { numRuns: 150 },
    );
  });
});
