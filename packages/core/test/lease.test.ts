import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createEngine, LeaseLostError, MemoryStore } from '../src/index.ts';
import { keepLease } from '../src/lease.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const owner = { scope: 'lease-test', key: 'k', token: 't' };
const BUILT_LEASE = fileURLToPath(new URL('../dist/lease.js', import.meta.url));

describe('E6: keepLease', () => {
  it('E6: renews every third of the lease, one renewal at a time, with the lease it keeps', async () => {
    const calls: number[] = [];
    const lease = keepLease({
      store: { renew: async ({ leaseMs }) => (calls.push(leaseMs), true) },
      owner,
      leaseMs: 300,
    });
    await sleep(470);
    lease.stop();
    expect(calls.length).toBeGreaterThanOrEqual(3);
    expect(calls.length).toBeLessThanOrEqual(5);
    expect(new Set(calls)).toEqual(new Set([300]));
    expect(lease.signal.aborted).toBe(false);
  });

  it('E6: its timer is unref’d: a process whose only work is a kept lease exits at once', async () => {
    const script = `import { keepLease } from ${JSON.stringify(BUILT_LEASE)};
      keepLease({ store: { renew: async () => true }, owner: { scope: 's', key: 'k', token: 't' }, leaseMs: 60000 });`;
    const started = Date.now();
    await new Promise<void>((resolve, reject) =>
      execFile(process.execPath, ['--input-type=module', '-e', script], { timeout: 10_000 }, (error) =>
        error ? reject(error) : resolve(),
      ),
    );
    expect(Date.now() - started).toBeLessThan(8_000);
  });

  it('E6: stop() clears its timer: no renewal after, however often it is called', async () => {
    let renewals = 0;
    const lease = keepLease({ store: { renew: async () => (renewals++, true) }, owner, leaseMs: 60 });
    await sleep(50);
    lease.stop();
    lease.stop();
    const stoppedAt = renewals;
    await sleep(150);
    expect(renewals).toBe(stoppedAt);
  });

  it("E6: a renewal that finds the claim fenced aborts the signal with LeaseLostError('fenced'), reported once, and renews no more", async () => {
    let renewals = 0;
    const lost: LeaseLostError[] = [];
    const lease = keepLease({
      store: { renew: async () => (renewals++, false) },
      owner,
      leaseMs: 60,
      onLost: (error) => lost.push(error),
    });
    await sleep(150);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(lease.signal.reason).toMatchObject({ reason: 'fenced', code: 'idempotency_lease_lost' });
    expect(lost).toHaveLength(1);
    expect(renewals).toBe(1);
    lease.stop();
  });

  it("E6: a store unreachable for a whole lease aborts the signal with LeaseLostError('unreachable'); shorter outages do not", async () => {
    let failing = true;
    const errors: unknown[] = [];
    const lease = keepLease({
      store: {
        renew: async () => {
          if (failing) throw new Error('connection refused');
          return true;
        },
      },
      owner,
      leaseMs: 300,
      onRenewError: (error) => errors.push(error),
    });
    await sleep(200);
    expect(lease.signal.aborted).toBe(false);
    expect(errors.length).toBeGreaterThan(0);
    await sleep(250);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.signal.reason).toMatchObject({ reason: 'unreachable' });
    failing = false;
    lease.stop();
  });

  it('E6: the engine stops renewing once the handler settled, whether it returned or threw', async () => {
    const store = new MemoryStore();
    let renewals = 0;
    const counting = Object.assign(Object.create(null) as object, {
      claim: store.claim.bind(store),
      complete: store.complete.bind(store),
      release: store.release.bind(store),
      get: store.get.bind(store),
      timeline: store.timeline.bind(store),
      sweep: store.sweep.bind(store),
      purge: store.purge.bind(store),
      ping: store.ping.bind(store),
      renew: (args: Parameters<MemoryStore['renew']>[0]) => {
        renewals++;
        return store.renew(args);
      },
    }) as MemoryStore;
    const engine = createEngine({ store: counting, lease: 60 });
    const signals: AbortSignal[] = [];
    await engine.execute({ scope: 's', key: randomUUID(), fingerprint: null }, async (claim) => {
      signals.push(claim.signal);
      await sleep(100);
      return 'ok';
    });
    await engine.execute({ scope: 's', key: randomUUID(), fingerprint: null }, async (claim) => {
      signals.push(claim.signal);
      await sleep(100);
      throw new Error('boom');
    });
    const settled = renewals;
    expect(settled).toBeGreaterThanOrEqual(2);
    await sleep(150);
    expect(renewals).toBe(settled);
    expect(signals.map((signal) => signal.aborted)).toEqual([false, false]);
  });
});
