/**
 * Every TypeScript block of README.md and docs/*.md compiles, as a user pastes it, under strict
 * TypeScript and the ESLint config a generated app ships: create-t3-app's (typescript-eslint's
 * `recommendedTypeChecked` and `stylisticTypeChecked`, with t3's own rule settings), whose errors
 * fail `next build` (issue 37: `const { amount } = await request.json()` did).
 *
 * How a page marks its blocks:
 *
 * - ```` ```ts ```` — a whole file. Compiled against the built packages (`npm test` builds first).
 *   A block whose first line is a comment naming a file (`// src/server/idem.ts — …`) is written
 *   there, so that the page's other blocks import it (`~/` is `src/`, as in create-t3-app).
 * - ```` ```ts fragment ```` — part of a file (a router's entry, the lines to paste into t3's
 *   files). With a `<!-- snippet uses: … -->` comment just before it, the comment's code is put in
 *   front of it and the whole compiles like a file; without one, it is not compiled here (the
 *   create-t3-app ones are compiled in a generated app by `npm run test:consumer`).
 *
 * Each page is its own project under `.scratch/snippets/<page>/`, inside the repository, so that
 * `@idem/*` and the hosts resolve from its node_modules as in an app.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ESLint, type Linter } from 'eslint';
import MarkdownIt from 'markdown-it';
import tseslint from 'typescript-eslint';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const WORK = join(ROOT, '.scratch', 'snippets');

interface Snippet {
  page: string;
  /** 1-based line of the fence. */
  line: number;
  fragment: boolean;
  /** The `<!-- snippet uses: … -->` code put in front of it. */
  uses: string | undefined;
  code: string;
  /** Where it is written, relative to the page's project. */
  file: string;
}

const USES = /^<!--\s*snippet uses:\s*([\s\S]*?)\s*-->\s*$/;
/** `// src/app/api/orders/route.ts — …`: the file a block is. */
const NAMED_FILE = /^\/\/ ((?:src\/)?[\w.[\]/-]+\.ts)\b/;

/** The TypeScript blocks of one Markdown page. */
function snippetsOf(page: string, text: string): Snippet[] {
  const tokens = new MarkdownIt({ html: true }).parse(text, {});
  const snippets: Snippet[] = [];
  tokens.forEach((token, index) => {
    if (token.type !== 'fence') return;
    const [lang, ...flags] = token.info.trim().split(/\s+/);
    if (lang !== 'ts' && lang !== 'typescript') return;
    const previous = tokens[index - 1];
    const uses = previous?.type === 'html_block' ? USES.exec(previous.content.trim())?.[1] : undefined;
    const line = (token.map?.[0] ?? 0) + 1;
    const named = NAMED_FILE.exec(token.content.split('\n')[0] ?? '')?.[1];
    snippets.push({
      page,
      line,
      fragment: flags.includes('fragment'),
      uses,
      code: token.content,
      file: named && !flags.includes('fragment') ? named : `snippets/line-${line}.ts`,
    });
  });
  return snippets;
}

const pages = execFileSync('git', ['ls-files', 'README.md', 'docs/*.md'], { cwd: ROOT, encoding: 'utf8' })
  .split('\n')
  .filter(Boolean);
const all = pages.flatMap((page) => snippetsOf(page, readFileSync(join(ROOT, page), 'utf8')));
const compiled = all.filter((snippet) => !snippet.fragment || snippet.uses !== undefined);
const projects = [...new Set(compiled.map((snippet) => snippet.page))];
const projectDir = (page: string) => join(WORK, page.replace(/[^\w]+/g, '-'));

const COMPILER_OPTIONS = {
  strict: true,
  target: 'ES2022',
  lib: ['ES2023', 'DOM', 'DOM.Iterable'],
  module: 'ESNext',
  moduleResolution: 'Bundler',
  moduleDetection: 'force',
  verbatimModuleSyntax: false,
  esModuleInterop: true,
  isolatedModules: true,
  skipLibCheck: true,
  noEmit: true,
  types: ['node'],
  noUncheckedIndexedAccess: true,
  paths: { '~/*': ['./src/*'] },
};

/** create-t3-app 7.40's `eslint.config.js`, for TypeScript files (its drizzle plugin aside). */
const T3_ESLINT_RULES: Linter.RulesRecord = {
  '@typescript-eslint/array-type': 'off',
  '@typescript-eslint/consistent-type-definitions': 'off',
  '@typescript-eslint/consistent-type-imports': ['warn', { prefer: 'type-imports', fixStyle: 'inline-type-imports' }],
  '@typescript-eslint/no-unused-vars': ['warn', { argsIgnorePattern: '^_' }],
  '@typescript-eslint/require-await': 'off',
  '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { attributes: false } }],
};

/** Writes each page's project: its snippets as files, and a strict tsconfig. */
function writeProjects(): void {
  rmSync(WORK, { recursive: true, force: true });
  for (const page of projects) {
    const dir = projectDir(page);
    for (const snippet of compiled.filter((s) => s.page === page)) {
      const path = join(dir, snippet.file);
      mkdirSync(dirname(path), { recursive: true });
      const prelude = snippet.uses === undefined ? '' : `${snippet.uses}\n`;
      writeFileSync(path, `${prelude}${snippet.code}`);
    }
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: COMPILER_OPTIONS, include: ['**/*.ts'] }, null, 2),
    );
  }
}

/** Where a diagnostic of a project file sits in its page: `README.md:120 (snippet at line 112)`. */
function locate(page: string, file: string, fileLine: number): string {
  const snippet = compiled.find((s) => s.page === page && join(projectDir(page), s.file) === file);
  if (!snippet) return `${page} (${file})`;
  const preludeLines = snippet.uses === undefined ? 0 : snippet.uses.split('\n').length;
  const inBlock = fileLine - preludeLines;
  return inBlock >= 1
    ? `${page}:${snippet.line + inBlock} (block at line ${snippet.line})`
    : `${page}: the snippet-uses comment of the block at line ${snippet.line}`;
}

describe('docs snippets compile and lint as a generated app has them', () => {
  beforeAll(() => writeProjects());
  afterAll(() => rmSync(WORK, { recursive: true, force: true }));

  it('every page marks its blocks: most compile; fragments without a snippet-uses comment are few', () => {
    expect(pages).toContain('README.md');
    expect(compiled.length).toBeGreaterThan(20);
    // The README's blocks all compile.
    expect(all.filter((s) => s.page === 'README.md' && !compiled.includes(s))).toEqual([]);
  });

  it('strict tsc: no errors in any compiled snippet', () => {
    const errors: string[] = [];
    for (const page of projects) {
      const dir = projectDir(page);
      const config = ts.getParsedCommandLineOfConfigFile(
        join(dir, 'tsconfig.json'),
        {},
        {
          ...ts.sys,
          onUnRecoverableConfigFileDiagnostic: (d) => {
            throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
          },
        },
      );
      const program = ts.createProgram({ rootNames: config!.fileNames, options: config!.options });
      for (const d of ts.getPreEmitDiagnostics(program)) {
        const message = ts.flattenDiagnosticMessageText(d.messageText, '\n');
        if (!d.file || d.start === undefined) {
          errors.push(`${page}: ${message}`);
          continue;
        }
        const { line } = d.file.getLineAndCharacterOfPosition(d.start);
        errors.push(`${locate(page, d.file.fileName, line + 1)}: TS${d.code} ${message}`);
      }
    }
    expect(errors).toEqual([]);
  }, 300_000);

  it("ESLint with create-t3-app's typed config: no errors", async () => {
    const eslint = new ESLint({
      cwd: WORK,
      overrideConfigFile: true,
      overrideConfig: [
        ...(tseslint.configs.recommendedTypeChecked as Linter.Config[]),
        ...(tseslint.configs.stylisticTypeChecked as Linter.Config[]),
        {
          languageOptions: {
            parserOptions: { project: projects.map((page) => join(projectDir(page), 'tsconfig.json')) },
          },
          rules: T3_ESLINT_RULES,
        },
      ],
    });
    const results = await eslint.lintFiles(projects.map((page) => `${projectDir(page)}/**/*.ts`));
    const errors = results.flatMap((result) => {
      const page = projects.find((p) => result.filePath.startsWith(projectDir(p)))!;
      return result.messages
        .filter((message) => message.severity === 2)
        .map((message) => `${locate(page, result.filePath, message.line)}: ${message.ruleId} ${message.message}`);
    });
    expect(errors).toEqual([]);
  }, 300_000);
});
