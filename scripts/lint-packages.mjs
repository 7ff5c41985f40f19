#!/usr/bin/env node
// Lints what each package ships, as npm would pack it: publint (strict: warnings fail too) and
// are-the-types-wrong. The packages are ESM-only: Node 20.19+ `require()`s them (the consumer
// test proves it), so attw runs with its `esm-only` profile, which leaves out the node10 and
// "CommonJS importing ESM" resolutions that do not apply to such a package.
// Then what publishing needs beyond them: the same repository (with each package's directory),
// homepage, bugs, keywords, `publishConfig.access: public` and the root's `engines` on every
// package; and a source map and a declaration map beside each shipped .js and .d.ts, whose
// sources are shipped too.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const packages = ['core', 'drizzle', 'trpc', 'envelop', 'fetch', 'apollo-server'];
const checks = [
  (dir) => ['publint', ['--strict', dir]],
  (dir) => ['attw', ['--pack', dir, '--profile', 'esm-only', '--format', 'table-flipped']],
];

let failed = 0;
for (const name of packages) {
  for (const check of checks) {
    const [tool, args] = check(`packages/${name}`);
    const run = spawnSync('npx', ['--no-install', tool, ...args], { cwd: root, stdio: 'inherit' });
    if (run.status !== 0) {
      failed++;
      console.error(`[lint:packages] ${tool} failed for @idem/${name}`);
    }
  }
}
const rootManifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
let repository;
for (const name of packages) {
  const dir = join(root, 'packages', name);
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const problems = [];
  repository ??= manifest.repository?.url;
  if (manifest.repository?.url !== repository) problems.push(`repository.url differs from the others (${repository})`);
  if (manifest.repository?.directory !== `packages/${name}`)
    problems.push(`repository.directory is not packages/${name}`);
  if (typeof manifest.homepage !== 'string' || manifest.homepage === '') problems.push('no homepage');
  if (typeof manifest.bugs?.url !== 'string') problems.push('no bugs.url');
  if (!Array.isArray(manifest.keywords) || manifest.keywords.length === 0) problems.push('no keywords');
  if (manifest.publishConfig?.access !== 'public') problems.push('publishConfig.access is not public');
  if (manifest.engines?.node !== rootManifest.engines?.node)
    problems.push(`engines.node ${manifest.engines?.node} is not the root's ${rootManifest.engines?.node}`);
  const packed = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: dir, encoding: 'utf8' });
  const shipped = new Set(JSON.parse(packed.stdout)[0].files.map((file) => file.path));
  for (const file of shipped) {
    if (!/^dist\/.*\.(js|d\.ts)$/.test(file)) continue;
    const map = `${file}.map`;
    if (!shipped.has(map)) {
      problems.push(`${file} ships without ${map}`);
      continue;
    }
    for (const source of JSON.parse(readFileSync(join(dir, map), 'utf8')).sources) {
      const target = relative(dir, resolve(dirname(join(dir, map)), source));
      if (!shipped.has(target) || !existsSync(join(dir, target)))
        problems.push(`${map} points at ${target}, which is not shipped`);
    }
  }
  for (const problem of problems) console.error(`[lint:packages] @idem/${name}: ${problem}`);
  failed += problems.length;
}

if (failed > 0) {
  console.error(`[lint:packages] ${failed} check(s) failed`);
  process.exit(1);
}
console.log(`[lint:packages] publint, attw, metadata and maps clean for ${packages.length} packages`);
