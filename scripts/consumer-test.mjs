#!/usr/bin/env node
// The consumer test: idem as a user installs it, outside this workspace.
//
// It packs every package with `npm pack`, installs the tarballs into fresh apps in a temporary
// directory, and then, with nothing of the monorepo on the path:
//   (a) takes the tRPC, Yoga and Apollo Server quick starts and the client snippet from docs/ itself,
//       type-checks and compiles them with the app's own tsc 5.9 (NodeNext, strict,
//       skipLibCheck), runs the JavaScript on plain Node and shows a replay over HTTP;
//   (b) imports every entry point with require() and with import;
//   (c) runs `npx idem migrate` and `npx idem explain` from the installed tarball;
//   (d) builds a Next.js App Router app serving tRPC through fetchRequestHandler on the Drizzle
//       store, with Turbopack and with webpack, and shows each build answering a replay;
//   (h) plain HTTP routes (@idem/fetch, scripts/consumer/plain-http.mjs): docs/http-routes.md's Hono
//       quick start on Node, its Next.js route handler and the ported peer cases in (d)'s app.
//   (a') puts docs/policy.md's recipes (node:http, Yoga) into the quick starts, compiles and
//       runs them, and follows a 400's problem type to the served policy (consumer/policy-recipes.mjs);
//   (e) installs a GraphQL client app with @idem/core and @idem/envelop only (consumer/client-only.mjs);
//   (f) generates a create-t3-app 7.40 app, applies docs/create-t3-app.md's blocks, and runs
//       drizzle-kit, next build, a replay, `npx idem explain` and the policy route (consumer/t3-app.mjs);
//   (g) clones this repository, runs `npm ci` and `npx idem --help` in the clone (consumer/fresh-clone.mjs).
// The plain app runs on drizzle-orm 0.44 and the Next.js app on 0.45: the two ends of the
// peer range @idem/drizzle declares.
//
// Run it after `npm run build`: `npm run test:consumer`. KEEP_CONSUMER_APP=1 keeps the
// temporary directory for a look afterwards.
import { execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  checkHonoQuickStart,
  checkNextRoutes,
  honoDependencies,
  honoQuickStart,
  nextRouteFiles,
} from './consumer/plain-http.mjs';
import { clientOnlySteps } from './consumer/client-only.mjs';
import { freshCloneSteps } from './consumer/fresh-clone.mjs';
import { policyRecipeSteps } from './consumer/policy-recipes.mjs';
import { t3AppSteps } from './consumer/t3-app.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PACKAGES = ['core', 'drizzle', 'trpc', 'envelop', 'fetch', 'apollo-server'];
/** Versions of the host libraries: the ones this workspace's lock resolved, so the npm cache serves them. */
const version = (name) => JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')).version;
const NEXT_VERSION = '16.4.6';
const REACT_VERSION = '19.2.0';

const work = mkdtempSync(join(tmpdir(), 'idem-consumer-'));
const results = { passed: 0, failed: 0 };
const children = new Set();

function log(line) {
  process.stdout.write(`[consumer] ${line}\n`);
}

/** Runs a command; resolves with its output, rejects with the output in the message. */
function run(command, args, { cwd, env, timeout = 600_000 } = {}) {
  return new Promise((resolve, reject) => {
    execFile(
      command,
      args,
      { cwd, env: { ...process.env, ...env }, timeout, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error)
          reject(
            new Error(`${command} ${args.join(' ')} failed (${error.code ?? error.signal}):\n${stdout}\n${stderr}`),
          );
        else resolve({ stdout, stderr });
      },
    );
  });
}

async function step(name, body) {
  const started = Date.now();
  try {
    await body();
    results.passed++;
    log(`ok   ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  } catch (error) {
    results.failed++;
    log(`FAIL ${name}\n${error instanceof Error ? error.stack : String(error)}`);
  }
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * Starts a long-running process in its own process group and waits until `url` answers. `stop`
 * ends the whole group: `next start` runs its server as a grandchild, which would otherwise
 * outlive the command and keep this script's pipes (and so this script) open.
 */
async function startServer(command, args, { cwd, env, url }) {
  const child = spawn(command, args, {
    cwd,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  children.add(child);
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const stop = () => stopGroup(child);
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null)
      throw new Error(`${command} ${args.join(' ')} exited with ${child.exitCode}:\n${output}`);
    try {
      await fetch(url);
      break;
    } catch {
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`${url} did not answer within 60 s:\n${output}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
  return { output: () => output, stop };
}

/** SIGTERM to the child's process group, SIGKILL after 5 s; resolves once the child has exited. */
function stopGroup(child) {
  children.delete(child);
  const signalGroup = (signal) => {
    try {
      process.kill(-child.pid, signal);
    } catch {}
  };
  return new Promise((resolve) => {
    const killer = setTimeout(() => signalGroup('SIGKILL'), 5_000);
    const done = () => {
      clearTimeout(killer);
      child.stdout.destroy();
      child.stderr.destroy();
      resolve();
    };
    if (child.exitCode !== null || child.signalCode !== null) {
      signalGroup('SIGKILL');
      return done();
    }
    child.once('exit', done);
    signalGroup('SIGTERM');
  });
}

async function post(url, body, headers = {}) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return {
    status: response.status,
    replayed: response.headers.get('idempotent-replayed'),
    text: await response.text(),
  };
}

/**
 * The three answers every server must give: executed, replayed (the same body; GraphQL adds
 * `extensions.idempotency.replayed`, so there the `data` is compared), 422 for another payload.
 */
async function assertReplay(label, url, body, otherBody, { graphql = false } = {}) {
  const headers = {};
  const key = `"consumer-${label.replace(/[^A-Za-z0-9]+/g, '-')}-${Date.now()}"`;
  const first = await post(url, body, { 'idempotency-key': key, ...headers });
  const second = await post(url, body, { 'idempotency-key': key, ...headers });
  const reused = await post(url, otherBody, { 'idempotency-key': key, ...headers });
  log(`  ${label}: first ${first.status} replayed=${first.replayed} ${first.text}`);
  log(`  ${label}: retry ${second.status} replayed=${second.replayed} ${second.text}`);
  log(`  ${label}: other payload ${reused.status} ${reused.text.slice(0, 120)}…`);
  assert(
    first.status === 200 && first.replayed === null,
    `${label}: the first request should execute, got ${first.status} replayed=${first.replayed}`,
  );
  assert(
    second.status === 200 && second.replayed === 'true',
    `${label}: the retry should be a replay, got ${second.status} replayed=${second.replayed}`,
  );
  const same = graphql
    ? JSON.stringify(JSON.parse(second.text).data) === JSON.stringify(JSON.parse(first.text).data)
    : second.text === first.text;
  assert(same, `${label}: the replay should repeat the first answer`);
  if (graphql)
    assert(
      JSON.parse(second.text).extensions?.idempotency?.replayed === true,
      `${label}: a GraphQL replay carries extensions.idempotency.replayed`,
    );
  assert(reused.status === 422, `${label}: another payload with the same key should answer 422, got ${reused.status}`);
  return key;
}

/** The docs/ pages whose snippets the consumer test compiles and runs. */
const DOC_PAGES = [
  'trpc.md',
  'graphql-yoga.md',
  'apollo-server.md',
  'http-routes.md',
  'clients.md',
  'policy.md',
  'create-t3-app.md',
];

/** The first ```ts block after a heading of the guides (docs/). */
function readmeBlock(readme, heading) {
  const at = readme.indexOf(`\n${heading}\n`);
  assert(at >= 0, `docs/ has no heading "${heading}"`);
  const match = /```ts(?: fragment)?\n([\s\S]*?)```/.exec(readme.slice(at));
  assert(match, `docs/ has no ts block after "${heading}"`);
  return match[1];
}

/** Replaces `from` in a guide's snippet; the test fails if the guide no longer says it. */
function patch(source, from, to, what) {
  assert(
    source.includes(from),
    `the guides' ${what} no longer contains ${JSON.stringify(from)}: update scripts/consumer-test.mjs`,
  );
  return source.replaceAll(from, to);
}

async function pack() {
  const tarballs = join(work, 'tarballs');
  mkdirSync(tarballs);
  const files = {};
  for (const name of PACKAGES) {
    const { stdout } = await run('npm', ['pack', '--silent', '--pack-destination', tarballs], {
      cwd: join(ROOT, 'packages', name),
    });
    const file = stdout.trim().split('\n').pop();
    files[`@idem/${name}`] = `file:${join(tarballs, file)}`;
    const { stdout: listing } = await run('tar', ['-tzf', join(tarballs, file)]);
    const shipped = listing.trim().split('\n');
    const stray = shipped.filter(
      (path) =>
        !/^package\/(dist\/.*\.(js|d\.ts)(\.map)?|src\/.*\.ts|bin\/idem\.js|package\.json|README\.md|LICENSE)$/.test(
          path,
        ),
    );
    assert(
      stray.length === 0,
      `@idem/${name} ships files outside dist/, src/ (the maps' sources), bin/, README and LICENSE: ${stray.join(', ')}`,
    );
    // The sources ship for the source and declaration maps only: every one of them is a map's source.
    const sources = shipped.filter((path) => path.startsWith('package/src/'));
    const mapped = shipped.filter((path) => path.endsWith('.map')).length;
    assert(mapped > 0 && sources.length > 0, `@idem/${name} should ship source maps and the sources they name`);
    log(`  packed @idem/${name}: ${file}, ${shipped.length} files`);
  }
  return files;
}

function appPackage(name, tarballs, dependencies, scripts = {}) {
  return {
    name,
    private: true,
    type: 'module',
    scripts,
    dependencies: { ...tarballs, ...dependencies },
    // The tarballs depend on each other by version range (^0.1.0); the overrides make npm take
    // the packed tarballs rather than look for those versions on the registry.
    overrides: tarballs,
  };
}

async function plainNodeApp(tarballs) {
  const app = join(work, 'node-app');
  mkdirSync(join(app, 'src'), { recursive: true });
  writeFileSync(
    join(app, 'package.json'),
    JSON.stringify(
      appPackage('idem-consumer-node', tarballs, {
        '@trpc/server': version('@trpc/server'),
        '@trpc/client': version('@trpc/client'),
        zod: version('zod'),
        graphql: version('graphql'),
        'graphql-yoga': version('graphql-yoga'),
        // Yoga's CSRF plugin, which useYogaIdempotency's csrfPrevention runs (an optional peer).
        '@graphql-yoga/plugin-csrf-prevention': version('@graphql-yoga/plugin-csrf-prevention'),
        '@envelop/core': version('@envelop/core'),
        // The optional peers of @idem/envelop/apollo and /urql, so that every entry loads.
        '@apollo/client': version('@apollo/client'),
        rxjs: version('rxjs'),
        '@urql/core': version('@urql/core'),
        // The peer of @idem/apollo-server.
        '@apollo/server': version('@apollo/server'),
        'drizzle-orm': '0.44.7',
        'better-sqlite3': version('better-sqlite3'),
        typescript: version('typescript'),
        '@types/node': version('@types/node'),
        '@types/better-sqlite3': version('@types/better-sqlite3'),
        ...honoDependencies(version),
      }),
      null,
      2,
    ),
  );
  writeFileSync(
    join(app, 'tsconfig.json'),
    JSON.stringify(
      {
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          skipLibCheck: true,
          outDir: 'dist',
          rootDir: 'src',
          types: ['node'],
        },
        include: ['src'],
      },
      null,
      2,
    ),
  );
  return app;
}

async function nextApp(tarballs, readme) {
  const app = join(work, 'next-app');
  const files = {
    'package.json': JSON.stringify(
      appPackage(
        'idem-consumer-next',
        tarballs,
        {
          next: NEXT_VERSION,
          react: REACT_VERSION,
          'react-dom': REACT_VERSION,
          '@trpc/server': version('@trpc/server'),
          zod: version('zod'),
          'drizzle-orm': version('drizzle-orm'),
          'better-sqlite3': version('better-sqlite3'),
          typescript: version('typescript'),
          '@types/node': version('@types/node'),
          '@types/react': '19.2.2',
          '@types/better-sqlite3': version('@types/better-sqlite3'),
        },
        { build: 'next build' },
      ),
      null,
      2,
    ),
    'next.config.mjs': 'export default {};\n',
    'tsconfig.json': JSON.stringify(
      {
        compilerOptions: {
          target: 'ES2022',
          lib: ['dom', 'dom.iterable', 'esnext'],
          strict: true,
          skipLibCheck: true,
          noEmit: true,
          module: 'esnext',
          moduleResolution: 'bundler',
          resolveJsonModule: true,
          isolatedModules: true,
          esModuleInterop: true,
          jsx: 'react-jsx',
          incremental: true,
          plugins: [{ name: 'next' }],
        },
        include: ['next-env.d.ts', '**/*.ts', '**/*.tsx', '.next/types/**/*.ts'],
        exclude: ['node_modules'],
      },
      null,
      2,
    ),
    'app/layout.tsx': `export default function RootLayout({ children }: { children: React.ReactNode }) {
  return (
    <html lang="en">
      <body>{children}</body>
    </html>
  );
}
`,
    'app/page.tsx': `export default function Home() {
  return <main>idem on Next.js</main>;
}
`,
    // As create-t3-app lays it out: the database, the tRPC setup, a router, the route handler.
    'src/server/db.ts': `import Database from 'better-sqlite3';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { migrate } from '@idem/drizzle';

const sqlite = new Database(process.env.IDEM_DB ?? 'idem-next.db');
sqlite.pragma('journal_mode = WAL');
export const db = drizzle(sqlite);
await migrate(db);
`,
    'src/server/trpc.ts': `import { initTRPC } from '@trpc/server';
import { idempotencyErrorFormatter, type IdempotencyContext } from '@idem/trpc';

// create-t3-app's context takes the request headers; idem's transport rides along.
export const createTRPCContext = async (opts: { headers: Headers } & Partial<IdempotencyContext>) => ({
  userId: opts.headers.get('x-user-id') ?? 'anonymous',
  ...opts,
});
export type Context = Awaited<ReturnType<typeof createTRPCContext>>;

const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter });
export const createTRPCRouter = t.router;
export const publicProcedure = t.procedure;
`,
    'src/server/root.ts': `import { z } from 'zod';
import { createDrizzleStore } from '@idem/drizzle';
import { idempotency } from '@idem/trpc';
import { db } from './db';
import { createTRPCRouter, publicProcedure, type Context } from './trpc';

const idempotent = idempotency({ store: createDrizzleStore(db), principal: (ctx: Context) => ctx.userId });

export const appRouter = createTRPCRouter({
  createOrder: publicProcedure
    .input(z.object({ amount: z.number().int().positive() }))
    .use(idempotent)
    .mutation(({ input }) => ({ orderId: crypto.randomUUID(), amount: input.amount })),
});
export type AppRouter = typeof appRouter;
`,
    'app/api/trpc/[trpc]/route.ts': `import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { idempotencyContext } from '@idem/trpc';
import { appRouter } from '../../../../src/server/root';
import { createTRPCContext } from '../../../../src/server/trpc';

const handler = (req: Request) =>
  fetchRequestHandler({
    endpoint: '/api/trpc',
    req,
    router: appRouter,
    createContext: (opts) => createTRPCContext({ headers: req.headers, ...idempotencyContext(opts) }),
  });

export { handler as GET, handler as POST };
`,
    ...nextRouteFiles({ readme, readmeBlock, patch }),
  };
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(app, path, '..'), { recursive: true });
    writeFileSync(join(app, path), content);
  }
  return app;
}

async function main() {
  log(`working in ${work} (Node ${process.version})`);
  let tarballs;
  await step('npm pack: every package ships dist/ with its maps, the src/ they name, README and LICENSE', async () => {
    tarballs = await pack();
  });
  if (!tarballs) return;

  // The guides the snippets come from, one after another, each from its "# Title" line.
  const readme = DOC_PAGES.map((page) => `\n${readFileSync(join(ROOT, 'docs', page), 'utf8')}`).join('');
  const nodeApp = await plainNodeApp(tarballs);
  const next = await nextApp(tarballs, readme);
  let installed = false;
  await step('npm install of the tarballs into a fresh Node app (drizzle-orm 0.44)', async () => {
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: nodeApp });
    installed = true;
  });

  if (installed) {
    const port = { trpc: await freePort(), yoga: await freePort() };
    let trpcKey;
    await step(
      "(a) the guides' quick starts and client snippet compile with the user's tsc (NodeNext, strict; and with exactOptionalPropertyTypes, noPropertyAccessFromIndexSignature, noUncheckedIndexedAccess)",
      async () => {
        const trpc = patch(
          readmeBlock(readme, '# tRPC'),
          '.listen(3000)',
          ".listen(Number(process.env['PORT']))",
          'tRPC quick start',
        );
        const yoga = patch(
          readmeBlock(readme, '# GraphQL Yoga'),
          '.listen(4000)',
          ".listen(Number(process.env['PORT']))",
          'Yoga quick start',
        );
        const apollo = patch(
          readmeBlock(readme, '## Standalone'),
          'listen: { port: 4000 }',
          "listen: { port: Number(process.env['PORT']) }",
          'Apollo Server quick start',
        );
        let client = patch(
          readmeBlock(readme, '## Clients that know the shelf life'),
          "'http://localhost:3000'",
          // biome-ignore lint/suspicious/noTemplateCurlyInString: the replacement is TypeScript source with a template literal
          "`http://127.0.0.1:${process.env['PORT']}`",
          'client snippet',
        );
        // The snippet builds a client for the quick start's AppRouter; the test then calls it.
        client = `import type { AppRouter } from './trpc.js';\n${client}\nconsole.log(JSON.stringify(await trpc.createOrder.mutate({ amount: 7 })));\n`;
        writeFileSync(join(nodeApp, 'src/trpc.ts'), trpc);
        writeFileSync(join(nodeApp, 'src/yoga.ts'), yoga);
        writeFileSync(join(nodeApp, 'src/apollo.ts'), apollo);
        writeFileSync(join(nodeApp, 'src/client.ts'), client);
        writeFileSync(join(nodeApp, 'src/hono.ts'), honoQuickStart({ readme, readmeBlock, patch }));
        await run('npx', ['--no-install', 'tsc', '-p', '.'], { cwd: nodeApp });
        // A stricter user: idem's declarations must not add errors under the flags strict leaves off.
        writeFileSync(
          join(nodeApp, 'tsconfig.strict.json'),
          JSON.stringify({
            extends: './tsconfig.json',
            compilerOptions: {
              noEmit: true,
              exactOptionalPropertyTypes: true,
              noPropertyAccessFromIndexSignature: true,
              noUncheckedIndexedAccess: true,
              noImplicitOverride: true,
            },
          }),
        );
        await run('npx', ['--no-install', 'tsc', '-p', 'tsconfig.strict.json'], { cwd: nodeApp });
      },
    );

    await step(
      '(a) the compiled tRPC quick start runs on plain Node and replays over HTTP; the guide client calls it',
      async () => {
        const server = await startServer(process.execPath, ['dist/trpc.js'], {
          cwd: nodeApp,
          env: { PORT: String(port.trpc) },
          url: `http://127.0.0.1:${port.trpc}/`,
        });
        try {
          trpcKey = await assertReplay(
            'tRPC quick start',
            `http://127.0.0.1:${port.trpc}/createOrder`,
            { amount: 42 },
            { amount: 43 },
          );
          const { stdout } = await run(process.execPath, ['dist/client.js'], {
            cwd: nodeApp,
            env: { PORT: String(port.trpc) },
            timeout: 30_000,
          });
          log(`  guide's client: ${stdout.trim()}`);
          assert(JSON.parse(stdout).amount === 7, "the guide's client should create an order of 7");
        } finally {
          await server.stop();
        }
      },
    );

    await step('(a) the compiled Yoga quick start runs on plain Node and replays over HTTP', async () => {
      const server = await startServer(process.execPath, ['dist/yoga.js'], {
        cwd: nodeApp,
        env: { PORT: String(port.yoga) },
        url: `http://127.0.0.1:${port.yoga}/graphql?query=%7Bok%7D`,
      });
      try {
        const mutation = (amount) => ({ query: `mutation { createOrder(amount: ${amount}) { id amount } }` });
        await assertReplay('Yoga quick start', `http://127.0.0.1:${port.yoga}/graphql`, mutation(42), mutation(43), {
          graphql: true,
        });
      } finally {
        await server.stop();
      }
    });

    await step(
      '(a) the compiled Apollo Server quick start (@idem/apollo-server, @apollo/server) runs on plain Node and replays over HTTP',
      async () => {
        const apolloPort = await freePort();
        const server = await startServer(process.execPath, ['dist/apollo.js'], {
          cwd: nodeApp,
          env: { PORT: String(apolloPort) },
          url: `http://127.0.0.1:${apolloPort}/`,
        });
        try {
          const mutation = (amount) => ({ query: `mutation { createOrder(amount: ${amount}) { id amount } }` });
          await assertReplay(
            'Apollo Server quick start',
            `http://127.0.0.1:${apolloPort}/`,
            mutation(42),
            mutation(43),
            {
              graphql: true,
            },
          );
        } finally {
          await server.stop();
        }
      },
    );

    await step(
      '(h) the compiled Hono quick start runs on plain Node: 201, byte-identical replay, 422, 400',
      async () => {
        const honoPort = await freePort();
        const server = await startServer(process.execPath, ['dist/hono.js'], {
          cwd: nodeApp,
          env: { PORT: String(honoPort) },
          url: `http://127.0.0.1:${honoPort}/`,
        });
        try {
          await checkHonoQuickStart(`http://127.0.0.1:${honoPort}`, { log, assert });
        } finally {
          await server.stop();
        }
      },
    );
    await policyRecipeSteps({
      app: nodeApp,
      readme,
      quickStart: (heading) => readmeBlock(readme, heading),
      helpers: { step, run, startServer, freePort, assert, patch, log },
    });

    await step('(b) every entry point loads with require() and with import', async () => {
      const entries = PACKAGES.flatMap((name) => {
        const manifest = JSON.parse(readFileSync(join(ROOT, 'packages', name, 'package.json'), 'utf8'));
        return Object.keys(manifest.exports)
          .filter((subpath) => subpath !== './package.json')
          .map((subpath) => `@idem/${name}${subpath.slice(1)}`);
      });
      // @idem/core/conformance imports vitest, an optional peer the app does not have: that
      // entry must fail with a clear "cannot find vitest", and every other entry must load.
      const withoutConformance = entries.filter((entry) => entry !== '@idem/core/conformance');
      writeFileSync(
        join(nodeApp, 'entries.cjs'),
        `for (const entry of ${JSON.stringify(withoutConformance)}) { const m = require(entry); if (Object.keys(m).length === 0) throw new Error(entry + ' exports nothing'); console.log('require', entry, Object.keys(m).length); }\n`,
      );
      writeFileSync(
        join(nodeApp, 'entries.mjs'),
        `for (const entry of ${JSON.stringify(withoutConformance)}) { const m = await import(entry); if (Object.keys(m).length === 0) throw new Error(entry + ' exports nothing'); console.log('import', entry, Object.keys(m).length); }\n`,
      );
      const cjs = await run(process.execPath, ['entries.cjs'], { cwd: nodeApp });
      const esm = await run(process.execPath, ['entries.mjs'], { cwd: nodeApp });
      for (const line of `${cjs.stdout}${esm.stdout}`.trim().split('\n')) log(`  ${line}`);
      const conformance = await run(
        process.execPath,
        ['-e', "import('@idem/core/conformance').then(() => console.log('loaded'), (e) => console.log(e.code))"],
        { cwd: nodeApp },
      );
      assert(
        conformance.stdout.trim() === 'ERR_MODULE_NOT_FOUND',
        `@idem/core/conformance without vitest should fail to resolve vitest, got ${conformance.stdout}`,
      );
      log(`  @idem/core/conformance without vitest: ${conformance.stdout.trim()} (vitest is its optional peer)`);
      // @idem/core/otel loads without @opentelemetry/api (loaded above with every entry); calling it says what to install.
      const otel = await run(
        process.execPath,
        [
          '-e',
          "import('@idem/core/otel').then((m) => m.idempotencyTelemetry()).then(() => console.log('no error'), (e) => console.log(e.message))",
        ],
        { cwd: nodeApp },
      );
      assert(
        otel.stdout.trim() ===
          '[idem] idempotencyTelemetry() needs @opentelemetry/api, an optional peer of @idem/core: npm install @opentelemetry/api',
        `idempotencyTelemetry() without @opentelemetry/api should name the package to install, got ${otel.stdout}`,
      );
      log(`  @idem/core/otel without @opentelemetry/api: loads; idempotencyTelemetry() says ${otel.stdout.trim()}`);
    });

    await step('(c) npx idem migrate and npx idem explain from the installed tarball', async () => {
      const env = { DATABASE_URL: 'file:idem.db' };
      const migrate = await run('npx', ['--no-install', 'idem', 'migrate'], { cwd: nodeApp, env });
      log(`  idem migrate: ${migrate.stdout.trim()}`);
      assert(trpcKey, 'the tRPC quick start step stored no key to explain');
      const key = trpcKey.slice(1, -1);
      const explain = await run('npx', ['--no-install', 'idem', 'explain', key], { cwd: nodeApp, env });
      for (const line of explain.stdout.trim().split('\n')) log(`  ${line}`);
      assert(
        explain.stdout.includes(key) && /\b200\b/.test(explain.stdout),
        'idem explain should show the stored 200 of the quick start key',
      );
      const json = JSON.parse(
        (await run('npx', ['--no-install', 'idem', 'explain', key, '--json'], { cwd: nodeApp, env })).stdout,
      );
      assert(JSON.stringify(json).includes(key), 'idem explain --json should name the key');
    });
  }

  let nextInstalled = false;
  await step(
    `npm install of the tarballs into a Next.js ${NEXT_VERSION} App Router app (drizzle-orm ${version('drizzle-orm')})`,
    async () => {
      await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: next });
      nextInstalled = true;
    },
  );
  if (nextInstalled) {
    for (const bundler of ['turbopack', 'webpack']) {
      await step(
        `(d, e) next build (${bundler}) and next start answer a replay through fetchRequestHandler and through idempotent() route handlers`,
        async () => {
          rmSync(join(next, '.next'), { recursive: true, force: true });
          const build = await run(
            'npx',
            ['--no-install', 'next', 'build', bundler === 'webpack' ? '--webpack' : '--turbopack'],
            { cwd: next, env: { NEXT_TELEMETRY_DISABLED: '1', IDEM_DB: join(next, `build-${bundler}.db`) } },
          );
          assert(build.stdout.includes('/api/trpc/[trpc]'), `next build did not list the tRPC route:\n${build.stdout}`);
          assert(
            build.stdout.includes('/api/orders'),
            `next build did not list the guide's route handler:\n${build.stdout}`,
          );
          const port = await freePort();
          const server = await startServer(
            'npx',
            ['--no-install', 'next', 'start', '-p', String(port), '-H', '127.0.0.1'],
            {
              cwd: next,
              env: { NEXT_TELEMETRY_DISABLED: '1', IDEM_DB: join(next, `${bundler}.db`) },
              url: `http://127.0.0.1:${port}/`,
            },
          );
          try {
            await assertReplay(
              `Next.js ${bundler}`,
              `http://127.0.0.1:${port}/api/trpc/createOrder`,
              { amount: 42 },
              { amount: 43 },
            );
            await checkNextRoutes(`Next.js ${bundler}`, `http://127.0.0.1:${port}`, { log, assert });
          } finally {
            await server.stop();
          }
        },
      );
    }
  }

  const helpers = { step, run, startServer, freePort, assert, log };
  await clientOnlySteps({ work, tarballs, helpers });
  await t3AppSteps({
    root: ROOT,
    work,
    tarballs,
    readme,
    databaseUrl: process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test',
    helpers,
  });
  await freshCloneSteps({ root: ROOT, work, helpers });
}

try {
  await main();
} finally {
  await Promise.all([...children].map((child) => stopGroup(child)));
  if (process.env.KEEP_CONSUMER_APP) log(`kept ${work}`);
  else rmSync(work, { recursive: true, force: true });
  process.stdout.write(`consumer: ${results.passed} passed, ${results.failed} failed\n`);
  // Nothing of the apps may keep this script alive: it ends here, with the verdict.
  process.exit(results.failed > 0 ? 1 : 0);
}
