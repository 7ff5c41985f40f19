/**
 * The README says Node 20.19 or newer, and `npm ci` on Node 20.19 must not say otherwise: every
 * package the lockfile installs admits the root's minimum Node (`engines.node`), so `npm ci`
 * prints no `EBADENGINE` warning. The @graphql-tools releases that pull `@whatwg-node/*` 2.x
 * (Node 22.15+) under graphql-yoga are held back by the root `overrides`; a new one that demands
 * newer Node fails here, naming it.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const read = (file: string) => JSON.parse(readFileSync(`${ROOT}/${file}`, 'utf8')) as unknown;

describe('engines: what npm ci installs runs on the Node the README promises', () => {
  it('every package in package-lock.json admits the root engines.node minimum', () => {
    const { engines } = read('package.json') as { engines: { node: string } };
    const minimum = semver.minVersion(engines.node);
    expect(minimum?.version).toBe('20.19.0');
    const { packages } = read('package-lock.json') as {
      packages: Record<string, { version?: string; engines?: unknown }>;
    };
    const refusing = Object.entries(packages)
      .filter(([, entry]) => {
        const node = (entry.engines as { node?: unknown } | undefined)?.node;
        return typeof node === 'string' && !semver.satisfies(minimum!, node);
      })
      .map(([path, entry]) => `${path}@${entry.version} wants node ${(entry.engines as { node: string }).node}`);
    expect(refusing).toEqual([]);
  });
});
