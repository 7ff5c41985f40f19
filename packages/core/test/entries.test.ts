/**
 * The public surface of `@idem/core`, counted: the root entry is a curated list of what an
 * application calls (at most 40 runtime names, as tRPC's explicit `index.ts`), and every
 * runtime name lives on exactly one entry, so that a helper cannot creep back onto the root
 * or be reachable twice under two names of the package.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import * as adapter from '../src/adapter.ts';
import * as client from '../src/client-retry.ts';
import * as conformance from '../src/conformance.ts';
import * as essentials from '../src/essentials.ts';
import * as http from '../src/http-entry.ts';
import * as root from '../src/index.ts';
import * as keyStatus from '../src/key-status-entry.ts';
import * as otel from '../src/otel.ts';
import * as store from '../src/store-entry.ts';

const MAX_ROOT_NAMES = 40;

/**
 * Each entry of package.json's `exports` and the module it ships, except two that repeat root
 * names on purpose: the re-export list for adapter users, and `./client`, which carries the key
 * rules so that it alone serves a browser client (checked below).
 */
const entries: Record<string, object> = {
  '.': root,
  './http': http,
  './key-status': keyStatus,
  './store': store,
  './adapter': adapter,
  './otel': otel,
  './conformance': conformance,
};

describe('@idem/core entries', () => {
  it(`keeps the root entry to at most ${MAX_ROOT_NAMES} runtime names`, () => {
    expect(Object.keys(root).length).toBeLessThanOrEqual(MAX_ROOT_NAMES);
  });

  it('exports each runtime name from one entry only', () => {
    const owners = new Map<string, string[]>();
    for (const [entry, module] of Object.entries(entries))
      for (const name of Object.keys(module)) owners.set(name, [...(owners.get(name) ?? []), entry]);
    const twice = [...owners].filter(([, where]) => where.length > 1);
    expect(twice).toEqual([]);
  });

  it('repeats on the client entry only the key rules a browser client needs', () => {
    const shared = Object.keys(client).filter((name) => Object.keys(root).includes(name) || name in adapter);
    expect(shared.sort()).toEqual(
      [
        'DEFAULT_KEY_FIELD',
        'IDEMPOTENCY_KEY_HEADER',
        'IDEMPOTENT_REPLAYED_HEADER',
        'IDEMPOTENT_RESUMABLE_HEADER',
        'formatIdempotencyKey',
        'parseIdempotencyKey',
        'validateKey',
      ].sort(),
    );
  });

  it('keeps the HTTP helpers off the root', () => {
    for (const name of Object.keys(http)) expect(Object.keys(root)).not.toContain(name);
    expect(Object.keys(http)).toEqual(expect.arrayContaining(['idempotencyCors', 'createPolicyHandler', 'escapeHtml']));
  });

  it('re-exports, as essentials for adapter users, only names of the root', () => {
    for (const name of Object.keys(essentials)) expect(Object.keys(root)).toContain(name);
  });

  it('ships every entry it tests, with its types, in package.json', () => {
    const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      exports: Record<string, { types?: string; default?: string } | string>;
    };
    for (const entry of [...Object.keys(entries), './client', './essentials']) {
      const target = manifest.exports[entry];
      expect(typeof target === 'object' && target.types && target.default, entry).toBeTruthy();
    }
  });
});
