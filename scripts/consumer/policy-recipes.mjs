// The consumer test's policy part: docs/policy.md's recipes for Node's http (tRPC standalone)
// and GraphQL Yoga, put into the guides' own quick starts as the recipes say,
// compiled by the plain app's tsc and run: a request without a key gets a 400 whose problem
// `type` leads to the served policy (200, JSON and HTML with the code's anchor).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const SECTION = '# Publishing the policy';

/** The ```ts blocks of the section, by the words their first comment line starts with. */
function recipes(readme) {
  const at = readme.indexOf(`\n${SECTION}\n`);
  if (at < 0) throw new Error(`docs/policy.md has no "${SECTION}" title`);
  const end = readme.indexOf('\n# ', at + 1);
  const section = readme.slice(at, end < 0 ? undefined : end);
  const blocks = [...section.matchAll(/```ts(?: fragment)?\n([\s\S]*?)```/g)].map((match) => match[1]);
  const find = (start) => {
    const block = blocks.find((code) => code.startsWith(`// ${start}`));
    if (!block) throw new Error(`docs/policy.md has no block starting "// ${start}"`);
    return block;
  };
  return { node: find("Node's http"), yoga: find('GraphQL Yoga') };
}

export async function policyRecipeSteps({ app, readme, quickStart, helpers }) {
  const { step, run, startServer, freePort, assert, patch, log } = helpers;
  let compiled = false;
  await step(
    "(a) docs/policy.md's recipes (node:http, Yoga) compile into the quick starts with the user's tsc",
    async () => {
      const { node, yoga } = recipes(readme);
      const listen = ".listen(Number(process.env['PORT']))";
      const trpc = patch(
        quickStart('# tRPC'),
        'createHTTPServer({ router: appRouter, createContext }).listen(3000);',
        patch(node, '.listen(3000)', listen, 'node:http policy recipe'),
        'tRPC quick start',
      );
      let graphql = patch(quickStart('# GraphQL Yoga'), '.listen(4000)', listen, 'Yoga quick start');
      graphql = patch(graphql, 'const yoga = createYoga({', `${yoga}\nconst yoga = createYoga({`, 'Yoga quick start');
      graphql = patch(graphql, '  plugins: [\n', '  plugins: [\n    servePolicy,\n', 'Yoga quick start');
      writeFileSync(join(app, 'src/policy-trpc.ts'), trpc);
      writeFileSync(join(app, 'src/policy-yoga.ts'), graphql);
      await run('npx', ['--no-install', 'tsc', '-p', '.'], { cwd: app });
      compiled = true;
    },
  );
  if (!compiled) return;

  for (const [name, file, request] of [
    ['tRPC (node:http)', 'dist/policy-trpc.js', (origin) => [`${origin}/createOrder`, { amount: 1 }]],
    [
      'Yoga (plugin)',
      'dist/policy-yoga.js',
      (origin) => [`${origin}/graphql`, { query: 'mutation { createOrder(amount: 1) { id } }' }],
    ],
  ]) {
    await step(`(a) the ${name} recipe serves /idempotency: a missing key's problem type answers 200`, async () => {
      const port = await freePort();
      const origin = `http://127.0.0.1:${port}`;
      const server = await startServer(process.execPath, [file], {
        cwd: app,
        env: { PORT: String(port) },
        url: `${origin}/idempotency`,
      });
      try {
        const [url, body] = request(origin);
        const refused = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        const answer = JSON.parse(await refused.text());
        const problem = answer.error?.data?.idempotency ?? answer.errors?.[0]?.extensions?.idempotency;
        const type = problem?.type;
        assert(refused.status === 400, `a request without a key should be a 400, got ${refused.status}`);
        assert(
          type === `${origin}/idempotency#idempotency_key_missing`,
          `the problem type should be the served policy, got ${type}`,
        );
        const page = await fetch(type.split('#')[0]);
        assert(page.status === 200, `GET ${type} should answer 200, got ${page.status}`);
        assert((await page.text()).includes('id="idempotency_key_missing"'), 'the page should have the anchor');
        const json = await (await fetch(`${origin}/idempotency`, { headers: { accept: 'application/json' } })).json();
        assert(
          json.documentationUrl === `${origin}/idempotency`,
          `the policy should name its URL, got ${json.documentationUrl}`,
        );
        log(`  ${name}: 400 → ${type} → 200`);
      } finally {
        await server.stop();
      }
    });
  }
}
