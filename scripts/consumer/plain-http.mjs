// The consumer test's plain HTTP part (@idem/fetch), called by scripts/consumer-test.mjs:
//   - docs/http-routes.md's Hono quick start, compiled by the plain Node app's tsc and run on Node;
//   - its Next.js route handlers (and the key-status route), built into the Next.js app, and a second route that
//     runs the behaviour cases ported from hono-idempotency and nestarc/idempotency inside a
//     real `next start` (the same cases run in packages/fetch/test through Hono and plain Requests).

/** What the plain Node app installs beside the tarballs for the Hono quick start. */
export function honoDependencies(version) {
  return { hono: version('hono'), '@hono/node-server': version('@hono/node-server') };
}

/** The guide's Hono quick start, listening on `PORT`. */
export function honoQuickStart({ readme, readmeBlock, patch }) {
  return patch(readmeBlock(readme, '## Hono'), 'port: 5000', "port: Number(process.env['PORT'])", 'Hono quick start');
}

/** The files the Next.js app gets: the guide's options module and routes, and the route of the ported cases. */
export function nextRouteFiles({ readme, patch }) {
  const at = readme.indexOf('\n## Next.js route handler\n');
  if (at < 0) throw new Error('docs/http-routes.md has no "## Next.js route handler" section');
  const blocks = new Map(
    [...readme.slice(at).matchAll(/```ts\n\/\/ (\S+)[^\n]*\n([\s\S]*?)```/g)].map(([, path, code]) => [path, code]),
  );
  const block = (path) => {
    if (!blocks.has(path)) throw new Error(`docs/http-routes.md has no block for ${path}`);
    return blocks.get(path);
  };
  const options = patch(
    block('src/server/idem.ts'),
    "new Database('idem.db', { timeout: 0 })",
    "new Database(process.env.IDEM_DB ?? 'idem.db', { timeout: 0 })",
    'Next.js route handler options',
  );
  // The app's own db module migrates the same file first (the guide has `idem migrate` do it).
  const migrated = `import './db';\n${options}`;
  const route = (path, depth) =>
    patch(block(path), "from '~/server/idem'", `from '${'../'.repeat(depth)}src/server/idem'`, path);
  return {
    'src/server/idem.ts': migrated,
    'app/api/orders/route.ts': route('src/app/api/orders/route.ts', 3),
    'app/api/idempotency/keys/[key]/route.ts': route('src/app/api/idempotency/keys/[key]/route.ts', 5),
    // Behaviour cases of hono-idempotency and nestarc/idempotency, as a Next.js route handler.
    'app/api/peers/[id]/route.ts': `import { createDrizzleStore } from '@idem/drizzle';
import { idempotencyClaim, idempotent } from '@idem/fetch';
import { db } from '../../../../src/server/db';

let executions = 0;

async function handler(request: Request, { params }: { params: Promise<{ id: string }> }): Promise<Response> {
  const { id } = await params;
  const execution = ++executions;
  const body = request.method === 'GET' ? {} : ((await request.json()) as { delayMs?: number; fail?: boolean; binary?: boolean });
  if (body.delayMs) await new Promise((resolve) => setTimeout(resolve, body.delayMs));
  if (body.fail) return Response.json({ error: 'the channel failed after charging', execution }, { status: 500 });
  if (body.binary)
    return new Response(new Uint8Array([0, 255, 1, 254, 0xc3, execution % 256]), {
      headers: { 'content-type': 'application/octet-stream' },
    });
  return Response.json(
    { id, execution, key: idempotencyClaim(request)?.key ?? null },
    { status: 201, headers: { location: \`/api/peers/\${id}\`, 'set-cookie': \`seen=\${execution}; Path=/; HttpOnly\` } },
  );
}

const options = {
  store: createDrizzleStore(db),
  principal: (request: Request) => request.headers.get('x-user-id') ?? 'anonymous',
};
export const POST = idempotent(handler, options);
export const GET = idempotent(handler, options);
`,
  };
}

async function send(url, { method = 'POST', key, body, headers = {} } = {}) {
  const response = await fetch(url, {
    method,
    headers: {
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...(key === undefined ? {} : { 'idempotency-key': key }),
      ...headers,
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const bytes = Buffer.from(await response.arrayBuffer());
  let json;
  try {
    json = JSON.parse(bytes.toString('utf8'));
  } catch {}
  return {
    status: response.status,
    headers: response.headers,
    bytes,
    json,
    replayed: response.headers.get('idempotent-replayed'),
  };
}

/** The guide's curl answers on `url`: 201, the byte-identical replay, 422, and 400 without a key. */
async function readmeAnswers(label, url, { log, assert }) {
  const key = `"consumer-${label.replace(/[^A-Za-z0-9]+/g, '-')}-${Date.now()}"`;
  const first = await send(url, { key, body: { amount: 42 } });
  const replay = await send(url, { key, body: { amount: 42 } });
  const reused = await send(url, { key, body: { amount: 43 } });
  const missing = await send(url, { body: { amount: 42 } });
  log(`  ${label}: first ${first.status} ${first.bytes.toString()}`);
  log(`  ${label}: retry ${replay.status} replayed=${replay.replayed} ${replay.bytes.toString()}`);
  log(
    `  ${label}: other payload ${reused.status} ${reused.json?.code}; no key ${missing.status} ${missing.json?.code}`,
  );
  assert(
    first.status === 201 && first.replayed === null,
    `${label}: the first request should answer 201, got ${first.status}`,
  );
  assert(replay.status === 201 && replay.replayed === 'true', `${label}: the retry should be a replayed 201`);
  assert(replay.bytes.equals(first.bytes), `${label}: the replay should repeat the first body byte for byte`);
  assert(
    reused.status === 422 && reused.json?.code === 'idempotency_key_reused',
    `${label}: another body should be a 422`,
  );
  assert(
    reused.headers.get('content-type') === 'application/problem+json',
    `${label}: a refusal is application/problem+json`,
  );
  assert(
    missing.status === 400 && missing.json?.code === 'idempotency_key_missing',
    `${label}: no key should be a 400`,
  );
}

/** The compiled Hono quick start on `baseUrl`. */
export async function checkHonoQuickStart(baseUrl, helpers) {
  await readmeAnswers('Hono quick start', `${baseUrl}/orders`, helpers);
}

/** The guide's route and the ported peer cases, against a running `next start` on `baseUrl`. */
export async function checkNextRoutes(label, baseUrl, { log, assert }) {
  await readmeAnswers(`${label} guide route`, `${baseUrl}/api/orders`, { log, assert });
  const peers = (id) => `${baseUrl}/api/peers/${id}`;
  const newKey = (name) => `next-${name}-${label.replace(/\W+/g, '-')}-${Date.now()}`;

  // E2: Location replayed, Set-Cookie only to the client that ran the handler (both peers' suites).
  let key = newKey('cookie');
  const first = await send(peers('a'), { key, body: {} });
  const replay = await send(peers('a'), { key, body: {} });
  assert(
    first.status === 201 && first.headers.get('set-cookie')?.startsWith('seen='),
    `${label}: Set-Cookie on the first answer`,
  );
  assert(
    replay.replayed === 'true' && replay.headers.get('set-cookie') === null,
    `${label}: Set-Cookie is never replayed`,
  );
  assert(replay.headers.get('location') === '/api/peers/a', `${label}: Location is replayed`);
  assert(replay.bytes.equals(first.bytes), `${label}: the replay repeats the body`);

  // S1: the actual path scopes the key (nestarc: capture routes).
  const other = await send(peers('b'), { key, body: {} });
  assert(
    other.status === 201 && other.replayed === null && other.json.id === 'b',
    `${label}: another path is another record`,
  );

  // E4 (differs on purpose from both peers, which delete the key): a 500 is stored and replayed.
  key = newKey('500');
  const failed = await send(peers('a'), { key, body: { fail: true } });
  const failedAgain = await send(peers('a'), { key, body: { fail: true } });
  assert(
    failed.status === 500 && failedAgain.status === 500 && failedAgain.replayed === 'true',
    `${label}: a 500 is replayed`,
  );
  assert(failedAgain.json.execution === failed.json.execution, `${label}: a 500 does not run the handler again`);

  // E2 (differs on purpose from nestarc, which skips binary bodies): bytes replay byte for byte.
  key = newKey('binary');
  const binary = await send(peers('a'), { key, body: { binary: true } });
  const binaryAgain = await send(peers('a'), { key, body: { binary: true } });
  assert(
    binaryAgain.replayed === 'true' && binaryAgain.bytes.equals(binary.bytes),
    `${label}: binary bodies replay byte for byte`,
  );
  assert(binaryAgain.headers.get('content-type') === 'application/octet-stream', `${label}: Content-Type replayed`);

  // GET passes through (hono-idempotency; differs from nestarc, which keys a decorated GET).
  key = newKey('get');
  const getOne = await send(peers('a'), { method: 'GET', key });
  const getTwo = await send(peers('a'), { method: 'GET', key });
  assert(getTwo.replayed === null && getTwo.json.execution !== getOne.json.execution, `${label}: GET is never keyed`);

  // E1/E3: two concurrent identical requests run the handler once; the other is a 409 or a replay (nestarc).
  key = newKey('race');
  const [a, b] = await Promise.all([
    send(peers('a'), { key, body: { delayMs: 300 } }),
    send(peers('a'), { key, body: { delayMs: 300 } }),
  ]);
  const statuses = [a.status, b.status].sort().join(',');
  assert(statuses === '201,409' || statuses === '201,201', `${label}: concurrent duplicates: ${statuses}`);
  if (statuses === '201,409') {
    const conflict = a.status === 409 ? a : b;
    assert(conflict.headers.get('retry-after') === '1', `${label}: the 409 carries Retry-After: 1`);
  } else assert(a.bytes.equals(b.bytes), `${label}: both 201s are one execution`);
  log(
    `  ${label} ported peer cases: Set-Cookie, Location, path scope, stored 500, binary, GET, race (${statuses}) as expected`,
  );
}
