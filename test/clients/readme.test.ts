/**
 * The GraphQL snippets of docs/clients.md's "Clients" section run as they are written: each is
 * copied out of the page, pointed at the payments example (through a proxy that loses the first
 * answer to a mutation) instead of localhost:3000, and run on Node with tsx. Each must pay once:
 * one key on its requests, one charge.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keysOf, startPayments, type PaymentsUnderTest } from './support/payments.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const README = readFileSync(join(ROOT, 'docs', 'clients.md'), 'utf8');
/** The headings of the snippets this test runs (the section holds others, e.g. tRPC's). */
const SNIPPETS = ['Apollo Client', 'urql', 'graphql-request', 'Plain fetch'];
/** What every snippet pays. */
const AMOUNT = 4200;

/** The first ```ts block under `### <heading>` of docs/clients.md's `## Clients` section. */
function snippet(heading: string): string {
  const start = README.indexOf('\n## Clients\n');
  expect(start, 'docs/clients.md has a "## Clients" section').toBeGreaterThanOrEqual(0);
  const end = README.indexOf('\n## ', start + 1);
  const section = README.slice(start, end === -1 ? undefined : end);
  const at = section.indexOf(`\n### ${heading}\n`);
  expect(at, `the Clients section has a "### ${heading}" snippet`).toBeGreaterThanOrEqual(0);
  const block = /```ts\n([\s\S]*?)```/.exec(section.slice(at));
  expect(block, `a ts block under "### ${heading}"`).not.toBeNull();
  return block![1]!;
}

function runTsx(file: string): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', file], { cwd: ROOT, timeout: 60_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${file} failed: ${error.message}\n${stdout}\n${stderr}`));
      else resolve({ stdout, stderr });
    });
  });
}

describe('the README Clients snippets, run against the payments example', () => {
  let payments: PaymentsUnderTest;
  let directory: string;
  beforeAll(async () => {
    payments = await startPayments();
    // Inside the repository (.scratch/ is ignored by git) so that the snippets' imports resolve.
    mkdirSync(join(ROOT, '.scratch'), { recursive: true });
    directory = mkdtempSync(join(ROOT, '.scratch', 'readme-clients-'));
  });
  afterAll(async () => {
    if (directory) rmSync(directory, { recursive: true, force: true });
    await payments?.close();
  });

  it.each(SNIPPETS)('E2: the %s snippet pays once although the first answer is lost', async (heading) => {
    const source = snippet(heading);
    expect(source).toContain('http://localhost:3000');
    const file = join(directory, `${heading.replaceAll(/\W+/g, '-')}.ts`);
    writeFileSync(file, source.replaceAll('http://localhost:3000', payments.proxy.url));
    const before = (await payments.charges(AMOUNT)).length;
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(1, '/graphql');

    const { stdout } = await runTsx(file);

    const mutations = payments.graphqlRequests(from).filter((request) => request.method === 'POST');
    expect(mutations.map((request) => [request.dropped, request.replayed])).toEqual([
      [true, false],
      [false, true],
    ]);
    expect(keysOf(mutations)).toHaveLength(1);
    const charges = await payments.charges(AMOUNT);
    expect(charges).toHaveLength(before + 1);
    expect(stdout).toContain(charges.at(-1)!.id);
  });
});
