// The consumer test's create-t3-app part: the first hour of a real t3 app, as a user lives it.
//
// create-t3-app 7.40.0 itself generates the app with its defaults for this stack (App Router,
// tRPC, Drizzle on PostgreSQL through postgres-js, no auth, no Tailwind): drizzle-orm ^0.41,
// drizzle-kit ^0.30, zod ^3, `tablesFilter: ["t3app_*"]`. The blocks of docs/create-t3-app.md are
// then read from that page and applied to the generated files as they stand (a block that no
// longer fits the generated file, or code that no longer builds, fails here). Then: install the
// tarballs, `npm run db:generate` (drizzle-kit) must write idem's prefixed tables beside t3's,
// `npm run db:migrate` applies them to a database of its own, `next build`, `next start`, one
// replay over HTTP and a 422, `npx idem explain` on the prefixed tables from the app's folder,
// the policy route answering the problem's `type` with 200, and the same blocks type-checked on
// zod 4.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const APP = 't3app';
const GENERATOR = 'create-t3-app@7.40.0';
const README_SECTION = '# create-t3-app';

/** How each guide block changes the generated file it names. */
const EDITS = {
  'src/server/db/schema.ts': 'append',
  'src/server/idem.ts': 'new',
  'src/server/api/trpc.ts': { from: /export const createTRPCContext[\s\S]*?\n\}\);\n/ },
  'src/server/api/routers/post.ts': { from: / {2}create: publicProcedure[\s\S]*?\n {4}\}\),\n/ },
  'src/server/api/root.ts': { from: /export const appRouter = createTRPCRouter\(\{[\s\S]*?\n\}\);\n/ },
  'src/app/api/trpc/[trpc]/route.ts': 'replace',
  'src/app/idempotency/route.ts': 'new',
  'src/trpc/react.tsx': { from: / {6}links: \[[\s\S]*?\n {6}\],\n/ },
};

/** The ```ts blocks of docs/create-t3-app.md, by the file their first line names. */
export function t3Blocks(readme) {
  const at = readme.indexOf(`\n${README_SECTION}\n`);
  if (at < 0) throw new Error(`docs/create-t3-app.md has no "${README_SECTION}" title`);
  const end = readme.indexOf('\n# ', at + 1);
  const section = readme.slice(at, end < 0 ? undefined : end);
  const blocks = new Map();
  for (const [, code] of section.matchAll(/```ts(?: fragment)?\n([\s\S]*?)```/g)) {
    const [first, ...rest] = code.split('\n');
    const path = /^\/\/ (\S+)/.exec(first)?.[1];
    if (!path) throw new Error(`a docs/create-t3-app.md block does not start with "// <file>": ${first}`);
    blocks.set(path, rest.join('\n').replace(/^\n+/, ''));
  }
  const expected = Object.keys(EDITS);
  const named = [...blocks.keys()];
  if (named.join() !== expected.join())
    throw new Error(
      `docs/create-t3-app.md's blocks name ${named.join(', ')}; scripts/consumer/t3-app.mjs applies ${expected.join(', ')}: update one or the other`,
    );
  return blocks;
}

/** A block's import lines, and the rest. */
function splitImports(block) {
  const lines = block.split('\n');
  const imports = lines.filter((line) => line.startsWith('import '));
  const body = lines
    .filter((line) => !line.startsWith('import '))
    .join('\n')
    .replace(/^\n+/, '');
  return { imports, body };
}

/** Applies the guide's blocks to the generated app, each as its comment line says. */
export function applyBlocks(app, blocks) {
  for (const [path, block] of blocks) {
    const file = join(app, path);
    const edit = EDITS[path];
    if (edit === 'new') {
      if (existsSync(file)) throw new Error(`${path} should be a new file, but the generator made one`);
      mkdirSync(join(file, '..'), { recursive: true });
      writeFileSync(file, block);
      continue;
    }
    const generated = readFileSync(file, 'utf8');
    if (edit === 'replace') writeFileSync(file, block);
    else if (edit === 'append') writeFileSync(file, `${generated}\n${block}`);
    else {
      const { imports, body } = splitImports(block);
      if (!edit.from.test(generated))
        throw new Error(`${path} as ${GENERATOR} makes it no longer has the part the guide replaces (${edit.from})`);
      // The generated file's own imports stay first ("use client" included); the guide's follow them.
      const lines = generated.replace(edit.from, () => `${body.replace(/\n*$/, '\n')}`).split('\n');
      const lastImport = lines.reduce((last, line, index) => (/^import |^} from /.test(line) ? index : last), -1);
      lines.splice(lastImport + 1, 0, ...imports);
      writeFileSync(file, lines.join('\n'));
    }
  }
}

/**
 * The steps, run by the consumer test's own `step` with its helpers. `tarballs` maps package
 * names to `file:` specs; `databaseUrl` is the PostgreSQL server (a database of its own is made
 * on it and dropped at the end).
 */
export async function t3AppSteps({ root, work, tarballs, readme, databaseUrl, helpers }) {
  const { step, run, startServer, freePort, assert, log } = helpers;
  const app = join(work, APP);
  let blocks;
  let ready = false;

  await step(`${GENERATOR} generates a t3 app (App Router, tRPC, Drizzle on PostgreSQL, no auth)`, async () => {
    blocks = t3Blocks(readme);
    await run(
      'npx',
      [
        '--yes',
        GENERATOR,
        APP,
        '--CI',
        '--noGit',
        '--noInstall',
        '--trpc',
        '--drizzle',
        '--appRouter',
        '--dbProvider=postgres',
        '--tailwind=false',
        '--nextAuth=false',
        '--betterAuth=false',
        '--prisma=false',
        '--eslint=false',
        '--biome=false',
      ],
      { cwd: work, env: { npm_config_yes: 'true' } },
    );
    const manifest = JSON.parse(readFileSync(join(app, 'package.json'), 'utf8'));
    log(
      `  generated: drizzle-orm ${manifest.dependencies['drizzle-orm']}, drizzle-kit ${manifest.devDependencies['drizzle-kit']}, zod ${manifest.dependencies.zod}, postgres ${manifest.dependencies.postgres}, next ${manifest.dependencies.next}`,
    );
    assert(manifest.dependencies['drizzle-orm'] === '^0.41.0', 'create-t3-app 7.40 should ship drizzle-orm ^0.41.0');
    assert(/^\^3\./.test(manifest.dependencies.zod), 'create-t3-app 7.40 should ship zod 3');
    const config = readFileSync(join(app, 'drizzle.config.ts'), 'utf8');
    assert(config.includes(`tablesFilter: ["${APP}_*"]`), `drizzle.config.ts should filter "${APP}_*":\n${config}`);
  });
  if (!blocks || !existsSync(join(app, 'package.json'))) return;

  await step("docs/create-t3-app.md's blocks apply to the generated files, as the page has them", async () => {
    applyBlocks(app, blocks);
    // Not the guide's business: this machine reaches the npm registry only, and t3's layout
    // fetches its font from Google at build time.
    const layout = join(app, 'src/app/layout.tsx');
    const page = readFileSync(layout, 'utf8');
    const font = /import \{ (\w+) \} from "next\/font\/google";\n/;
    assert(font.test(page), 'src/app/layout.tsx no longer loads a Google font: drop this patch');
    writeFileSync(
      layout,
      page.replace(font, '').replace(/const (\w+) = \w+\(\{[\s\S]*?\}\);\n/, 'const $1 = { className: "" };\n'),
    );
    const manifest = JSON.parse(readFileSync(join(app, 'package.json'), 'utf8'));
    const idem = Object.fromEntries(
      ['@idem/core', '@idem/drizzle', '@idem/trpc'].map((name) => [name, tarballs[name]]),
    );
    // @trpc/react-query pins @trpc/client to its own version: take every @trpc package at the
    // newest react-query the registry has, as a fresh `npm install` of the generator's ranges would.
    const { stdout } = await run('npm', ['view', '--prefer-offline', '@trpc/react-query', 'version']);
    const trpc = stdout.trim();
    for (const name of Object.keys(manifest.dependencies))
      if (name.startsWith('@trpc/')) manifest.dependencies[name] = trpc;
    log(`  @trpc/* ${trpc}`);
    manifest.dependencies = { ...manifest.dependencies, ...idem };
    manifest.overrides = idem;
    writeFileSync(join(app, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    ready = true;
  });
  if (!ready) return;

  let installed = false;
  await step(`npm install of the tRPC tarballs into the t3 app (drizzle-orm ^0.41, postgres-js)`, async () => {
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: app });
    const drizzle = JSON.parse(readFileSync(join(app, 'node_modules/drizzle-orm/package.json'), 'utf8')).version;
    const zod = JSON.parse(readFileSync(join(app, 'node_modules/zod/package.json'), 'utf8')).version;
    log(`  installed drizzle-orm ${drizzle}, zod ${zod}`);
    assert(drizzle.startsWith('0.41.'), `the t3 app should run on drizzle-orm 0.41, got ${drizzle}`);
    assert(!existsSync(join(app, 'node_modules/@idem/envelop')), 'a tRPC app should not get @idem/envelop');
    installed = true;
  });
  if (!installed) return;

  // A database of its own on the server, dropped at the end.
  const { default: pg } = await import(pathToFileURL(join(root, 'node_modules/pg/lib/index.js')).href);
  const database = `idem_t3_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: databaseUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${database}`);
  const url = new URL(databaseUrl);
  url.pathname = `/${database}`;
  const env = { DATABASE_URL: url.toString(), NEXT_TELEMETRY_DISABLED: '1' };
  try {
    let migrated = false;
    await step(
      "drizzle-kit generate writes the prefixed idem tables beside t3's, and migrate applies them",
      async () => {
        await run('npm', ['run', 'db:generate'], { cwd: app, env });
        const folder = join(app, 'drizzle');
        const sql = readdirSql(folder);
        for (const table of [`${APP}_post`, `${APP}_idem_keys`, `${APP}_idem_key_history`])
          assert(sql.includes(`CREATE TABLE "${table}"`), `drizzle-kit generate should create ${table}:\n${sql}`);
        assert(
          sql.includes(`"${APP}_idem_keys_expires_at_idx"`) && sql.includes(`WHERE "state" <> 'archived'`),
          'drizzle-kit generate should write the partial expiry index',
        );
        await run('npm', ['run', 'db:migrate'], { cwd: app, env });
        migrated = true;
      },
    );
    if (!migrated) return;

    let built = false;
    await step("next build of the t3 app with the guide's blocks (type-checked by Next)", async () => {
      const build = await run('npx', ['--no-install', 'next', 'build'], { cwd: app, env });
      for (const route of ['/api/trpc/[trpc]', '/idempotency'])
        assert(build.stdout.includes(route), `next build did not list ${route}:\n${build.stdout}`);
      built = true;
    });
    if (!built) return;

    let key;
    await step(
      'next start: post.create replays over HTTP, another payload is a 422 whose type the policy route answers with 200',
      async () => {
        const port = await freePort();
        const origin = `http://127.0.0.1:${port}`;
        const server = await startServer(
          'npx',
          ['--no-install', 'next', 'start', '-p', String(port), '-H', '127.0.0.1'],
          {
            cwd: app,
            env,
            url: `${origin}/`,
          },
        );
        try {
          key = `t3-${randomBytes(8).toString('hex')}`;
          const create = (name) =>
            fetch(`${origin}/api/trpc/post.create`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ json: { name, idempotencyKey: key } }),
            }).then(async (response) => ({
              status: response.status,
              replayed: response.headers.get('idempotent-replayed'),
              text: await response.text(),
            }));
          const first = await create('hello');
          const second = await create('hello');
          const other = await create('another');
          log(`  first ${first.status} ${first.text}`);
          log(`  retry ${second.status} replayed=${second.replayed} ${second.text}`);
          log(`  other payload ${other.status} ${other.text.slice(0, 160)}…`);
          assert(
            first.status === 200 && first.replayed === null,
            `the first create should execute, got ${first.status}`,
          );
          assert(second.status === 200 && second.text === first.text, 'the retry should replay the same post');
          assert(second.replayed === 'true', 'the replay should carry Idempotent-Replayed: true');
          assert(other.status === 422, `another name with the same key should be a 422, got ${other.status}`);
          const type = JSON.parse(other.text).error.json.data.idempotency.type;
          assert(
            /\/idempotency#idempotency_key_reused$/.test(type),
            `the 422's type should point at /idempotency, got ${type}`,
          );
          // Next reports the host it was asked for; the path is what the app serves.
          const target = new URL(type);
          const page = await fetch(`${origin}${target.pathname}`);
          const html = await page.text();
          assert(page.status === 200, `GET ${target.pathname} should answer 200, got ${page.status}`);
          assert(
            html.includes(`id="${target.hash.slice(1)}"`),
            `the policy page should have the anchor ${target.hash}`,
          );
          const json = await fetch(`${origin}${target.pathname}`, { headers: { accept: 'application/json' } });
          const policy = await json.json();
          assert(policy.endpoints?.[0]?.operation === 'post.create', 'the policy should list post.create');
          log(`  ${type} → ${page.status} (HTML with its anchor; JSON lists ${policy.endpoints[0].endpoint})`);
        } finally {
          await server.stop();
        }
      },
    );

    await step("npx idem explain in the t3 app's folder finds the prefixed tables from drizzle.config.ts", async () => {
      assert(key, 'the replay step stored no key to explain');
      const explain = await run('npx', ['--no-install', 'idem', 'explain', key], { cwd: app, env });
      for (const line of explain.stdout.trim().split('\n')) log(`  ${line}`);
      assert(explain.stdout.includes(`key "${key}": 1 generation`), 'idem explain should show the key');
      assert(/\b200 success\b/.test(explain.stdout), 'idem explain should show the stored 200');
      const policy = await run('npx', ['--no-install', 'idem', 'policy', '--json'], { cwd: app, env });
      const scopes = JSON.parse(policy.stdout).scopes.map((scope) => scope.scope);
      assert(
        scopes.some((scope) => scope.endsWith('post.create')),
        `idem policy should list post.create, got ${scopes}`,
      );
    });

    await step('the same blocks type-check on zod 4', async () => {
      await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', 'zod@^4'], {
        cwd: app,
      });
      await run('npx', ['--no-install', 'tsc', '--noEmit'], { cwd: app, env });
    });
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => {});
    await admin.end();
  }
}

/** The SQL drizzle-kit wrote into `folder`, every migration file in order. */
function readdirSql(folder) {
  if (!existsSync(folder)) return '';
  return readdirSync(folder)
    .sort()
    .filter((file) => file.endsWith('.sql'))
    .map((file) => readFileSync(join(folder, file), 'utf8'))
    .join('\n');
}
