/**
 * Development (issue 34): a V8 `.cpuprofile` (`node --cpu-prof`, `bench/probe.ts --cpu-prof`)
 * summarized: the share of the samples spent in each area (idem's packages, drizzle, the pg
 * driver, node's http and net, GC, idle) and the functions with the most self time.
 *
 *   node --import tsx bench/profile-summary.ts <file.cpuprofile> [top]
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file, topArg = '25'] = process.argv.slice(2);
if (!file) throw new Error('usage: profile-summary.ts <file.cpuprofile> [top]');
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((node) => [node.id, node]));

/** Where a frame's code lives, by its URL. */
function areaOf({ functionName, url }: ProfileNode['callFrame']): string {
  if (functionName === '(idle)') return 'idle';
  if (functionName === '(garbage collector)') return 'GC';
  if (functionName === '(program)') return 'program (native, not attributed)';
  if (url.includes('/packages/core/')) return '@idem/core';
  if (url.includes('/packages/drizzle/')) return '@idem/drizzle';
  if (url.includes('/drizzle-orm/')) return 'drizzle-orm';
  if (url.includes('/pg-protocol/') || url.includes('/pg/') || url.includes('/pg-pool/') || url.includes('/pg-types/'))
    return 'pg (node-postgres)';
  if (url.includes('/better-sqlite3/')) return 'better-sqlite3';
  if (url.includes('/bench/')) return 'bench server';
  if (url.startsWith('node:')) return `node:${url.slice(5).split('/')[0]}`;
  if (url === '') return `native: ${functionName || '(anonymous)'}`;
  return url.split('/node_modules/').at(-1)?.split('/')[0] ?? url;
}

const selfTime = new Map<number, number>();
let total = 0;
profile.samples.forEach((id, i) => {
  const delta = profile.timeDeltas[i] ?? 0;
  selfTime.set(id, (selfTime.get(id) ?? 0) + delta);
  total += delta;
});

const areas = new Map<string, number>();
const functions = new Map<string, number>();
for (const [id, time] of selfTime) {
  const frame = (byId.get(id) as ProfileNode).callFrame;
  const area = areaOf(frame);
  areas.set(area, (areas.get(area) ?? 0) + time);
  const name = `${frame.functionName || '(anonymous)'} ${frame.url.split('/').slice(-2).join('/')}:${frame.lineNumber + 1}`;
  functions.set(name, (functions.get(name) ?? 0) + time);
}

const busy = total - (areas.get('idle') ?? 0);
const share = (time: number, of: number) => `${((100 * time) / of).toFixed(1)}%`;
console.log(`${file}: ${(total / 1e6).toFixed(1)} s sampled, ${(busy / 1e6).toFixed(2)} s busy (not idle)\n`);
console.log('| area | self time | share of busy |');
console.log('| --- | --- | --- |');
for (const [area, time] of [...areas].sort((a, b) => b[1] - a[1]))
  if (area !== 'idle') console.log(`| ${area} | ${(time / 1000).toFixed(0)} ms | ${share(time, busy)} |`);
console.log('\n| function | self time | share of busy |');
console.log('| --- | --- | --- |');
for (const [name, time] of [...functions].sort((a, b) => b[1] - a[1]).slice(0, Number(topArg)))
  console.log(`| ${name} | ${(time / 1000).toFixed(0)} ms | ${share(time, busy)} |`);
