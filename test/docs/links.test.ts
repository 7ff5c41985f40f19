/**
 * Every relative link and image in the tracked Markdown leads to a file or folder inside the
 * repository, and every `#fragment` into a Markdown file names one of its headings (GitHub's
 * slug) or an explicit `<a id>` / `<a name>`. Rule ids such as `docs/spec.md#e4` must lead
 * somewhere in a fresh clone: the spec used to live outside the repository, and every link to it
 * was dead there.
 *
 * Markdown is read with markdown-it (CommonMark: code spans and fences hold no links, reference
 * links resolve) and headings are slugged with github-slugger, the algorithm GitHub uses.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import GithubSlugger from 'github-slugger';
import MarkdownIt, { type Token } from 'markdown-it';
import { describe, expect, it } from 'vitest';

interface Link {
  /** 1-based line of the target in its file. */
  line: number;
  target: string;
}

interface Repository {
  /** Paths relative to the repository root, `/`-separated, without a leading `./`. */
  files: ReadonlySet<string>;
  folders: ReadonlySet<string>;
  /** The text of a Markdown file of the repository, or undefined. */
  read(file: string): string | undefined;
}

const markdown = new MarkdownIt({ html: true });
// markdown-it drops `file:`, `data:` and `javascript:` links by default; they must be reported.
markdown.validateLink = () => true;

const ATTRIBUTE = (names: string) => new RegExp(String.raw`\b(?:${names})\s*=\s*(?:"([^"]*)"|'([^']*)')`, 'gi');
const EXTERNAL = /^(?:https?:|mailto:|\/\/)/i;
const SCHEME = /^[a-z][a-z0-9+.-]*:/i;

function attributeValues(html: string, names: string): string[] {
  return [...html.matchAll(ATTRIBUTE(names))].map((match) => match[1] ?? match[2] ?? '');
}

/** Each link and image target of a Markdown text, with the line it is written on. */
function extractLinks(text: string): Link[] {
  const lines = text.split('\n');
  const lineOf = (target: string, from: number, to: number): number => {
    const written = [target, safeDecode(target)];
    const found = (start: number, end: number) => {
      for (let index = start; index < end; index += 1) {
        if (written.some((form) => lines[index]!.includes(form))) return index + 1;
      }
      return undefined;
    };
    // A reference link's target sits on its definition's line, outside the paragraph.
    return found(from, to) ?? found(0, lines.length) ?? from + 1;
  };

  const links: Link[] = [];
  const visit = (tokens: Token[], map: [number, number]) => {
    for (const token of tokens) {
      const range = token.map ?? map;
      const add = (target: string | number | null) => {
        if (target !== null) links.push({ target: String(target), line: lineOf(String(target), range[0], range[1]) });
      };
      if (token.type === 'link_open') add(token.attrGet('href'));
      else if (token.type === 'image') add(token.attrGet('src'));
      else if (token.type === 'html_inline' || token.type === 'html_block')
        attributeValues(token.content, 'href|src').forEach(add);
      if (token.children) visit(token.children, range);
      if (token.map) map = range;
    }
  };
  visit(markdown.parse(text, {}), [0, lines.length]);
  return links;
}

/** The fragments a Markdown text can be linked to: heading slugs, as GitHub makes them, and explicit ids. */
function extractAnchors(text: string): Set<string> {
  const slugger = new GithubSlugger();
  const anchors = new Set<string>();
  const tokens = markdown.parse(text, {});
  const collectIds = (html: string) => {
    for (const id of attributeValues(html, 'id|name')) anchors.add(id);
  };
  tokens.forEach((token, index) => {
    if (token.type === 'html_block') collectIds(token.content);
    if (token.type !== 'inline') return;
    const children = token.children ?? [];
    for (const child of children) if (child.type === 'html_inline') collectIds(child.content);
    if (tokens[index - 1]?.type === 'heading_open') {
      const heading = children
        .filter((child) => child.type === 'text' || child.type === 'code_inline')
        .map((child) => child.content)
        .join('');
      anchors.add(slugger.slug(heading));
    }
  });
  return anchors;
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

/** What is wrong with each link of `file` (a repository path), as `file:line: target — reason`. */
function checkLinks(
  file: string,
  text: string,
  repository: Repository,
  anchorsOf: (file: string) => Set<string> | undefined,
): string[] {
  const problems: string[] = [];
  for (const { target, line } of extractLinks(text)) {
    const report = (reason: string) => problems.push(`${file}:${line}: ${target} — ${reason}`);
    if (EXTERNAL.test(target)) continue;
    if (SCHEME.test(target)) {
      report('points outside the repository');
      continue;
    }
    const hashAt = target.indexOf('#');
    const pathPart = (hashAt === -1 ? target : target.slice(0, hashAt)).replace(/\?.*$/, '');
    const fragment = hashAt === -1 ? '' : safeDecode(target.slice(hashAt + 1));

    let resolved = file;
    if (pathPart !== '') {
      const decoded = safeDecode(pathPart);
      // GitHub resolves a leading `/` from the repository root.
      resolved = path.posix
        .normalize(decoded.startsWith('/') ? decoded.slice(1) : path.posix.join(path.posix.dirname(file), decoded))
        .replace(/\/+$/, '');
      if (resolved === '..' || resolved.startsWith('../') || path.posix.isAbsolute(resolved)) {
        report('points outside the repository');
        continue;
      }
      if (resolved !== '.' && !repository.files.has(resolved) && !repository.folders.has(resolved)) {
        report(`no such file or folder in the repository (${resolved})`);
        continue;
      }
    }
    if (fragment !== '' && /\.md$/i.test(resolved)) {
      const anchors = anchorsOf(resolved);
      if (anchors && !anchors.has(fragment)) report(`no heading or anchor "#${fragment}" in ${resolved}`);
    }
  }
  return problems;
}

function git(root: string, ...args: string[]): string[] {
  return execFileSync('git', args, { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
    .split('\0')
    .filter(Boolean);
}

function openRepository(): { markdownFiles: string[]; repository: Repository } {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const root = execFileSync('git', ['rev-parse', '--show-toplevel'], { cwd: here, encoding: 'utf8' }).trim();
  // Tracked files plus new ones not ignored: a link to an ignored file (.data/, node_modules/)
  // works here but not in a fresh clone.
  const files = new Set(git(root, 'ls-files', '-z', '--cached', '--others', '--exclude-standard'));
  const folders = new Set<string>();
  for (const file of files) {
    for (let folder = path.posix.dirname(file); folder !== '.'; folder = path.posix.dirname(folder))
      folders.add(folder);
  }
  const markdownFiles = git(root, 'ls-files', '-z', '*.md');
  const texts = new Map<string, string | undefined>();
  const read = (file: string) => {
    if (!texts.has(file)) texts.set(file, files.has(file) ? readFileSync(path.join(root, file), 'utf8') : undefined);
    return texts.get(file);
  };
  return { markdownFiles, repository: { files, folders, read } };
}

function anchorLookup(repository: Repository): (file: string) => Set<string> | undefined {
  const cache = new Map<string, Set<string> | undefined>();
  return (file) => {
    if (!cache.has(file)) {
      const text = repository.read(file);
      cache.set(file, text === undefined ? undefined : extractAnchors(text));
    }
    return cache.get(file);
  };
}

describe('links in the Markdown', () => {
  it('every relative link and image of a tracked Markdown file leads inside the repository, anchors included', () => {
    const { markdownFiles, repository } = openRepository();
    const anchorsOf = anchorLookup(repository);
    const problems = markdownFiles.flatMap((file) =>
      checkLinks(file, repository.read(file) ?? '', repository, anchorsOf),
    );

    expect(markdownFiles).toContain('docs/spec.md');
    expect(problems, `broken links:\n${problems.join('\n')}`).toEqual([]);
  });

  it('every rule id of the spec can be linked as docs/spec.md#<id>', () => {
    const { repository } = openRepository();
    const anchors = anchorLookup(repository)('docs/spec.md');
    const ids = [
      'k1',
      'k2',
      'k3',
      'k4',
      'k5',
      's1',
      'f1',
      'f2',
      'f3',
      'e1',
      'e2',
      'e3',
      'e4',
      'e5',
      'e6',
      'e7',
      'r1',
      'r2',
      'r3',
      'r4',
      'x1',
      'x2',
      'x3',
      'a1',
    ];
    expect(ids.filter((id) => !anchors?.has(id))).toEqual([]);
  });

  it('reports a missing file, a missing anchor and a link out of the repository, each with its file and line', () => {
    const text = [
      '# Guide',
      '',
      'Fine: [spec](docs/spec.md#e4), [folder](docs/), [heading](docs/spec.md#e4-once-started-stored), [here](#guide),',
      '[site](https://example.com/x), `[code](nowhere.md)`.',
      '',
      'Broken: [gone](docs/gone.md) and',
      '![img](../shared/SPEC.md) then [anchor](docs/spec.md#e9) [ref][r] [file](file:///etc/passwd)',
      '',
      '```md',
      '[fenced](nowhere.md)',
      '```',
      '',
      'Back [up](#nowhere). <img src="docs/missing.png" alt="">',
      '',
      '[r]: docs/also-gone.md',
    ].join('\n');
    const texts: Record<string, string> = {
      'README.md': text,
      'docs/spec.md': '# Spec\n\n### <a id="e4"></a>E4. Once started, stored\n',
    };
    const repository: Repository = {
      files: new Set(Object.keys(texts)),
      folders: new Set(['docs']),
      read: (file) => texts[file],
    };

    expect(checkLinks('README.md', text, repository, anchorLookup(repository))).toEqual([
      'README.md:6: docs/gone.md — no such file or folder in the repository (docs/gone.md)',
      'README.md:7: ../shared/SPEC.md — points outside the repository',
      'README.md:7: docs/spec.md#e9 — no heading or anchor "#e9" in docs/spec.md',
      'README.md:15: docs/also-gone.md — no such file or folder in the repository (docs/also-gone.md)',
      'README.md:7: file:///etc/passwd — points outside the repository',
      'README.md:13: #nowhere — no heading or anchor "#nowhere" in README.md',
      'README.md:13: docs/missing.png — no such file or folder in the repository (docs/missing.png)',
    ]);
  });
});
