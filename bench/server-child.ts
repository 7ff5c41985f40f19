/**
 * What every bench server child shares: the constant cheap handler the HTTP variants "charge"
 * with, and the IPC protocol with the parent (bench/http.ts, bench/probe.ts): `{ port }` once
 * listening on 127.0.0.1, `'cpu'` / `'stats'` answered, `'stop'` closes, and the parent going
 * away (a crash, Ctrl-C) never leaves the child behind.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Payment {
  amount: number;
  currency: string;
}

let charges = 0;
/** What the HTTP variants "charge": a constant cheap handler, identical for all of them. */
export function charge(account: string, { amount, currency }: Payment) {
  charges++;
  return { id: `pay_${charges.toString(36)}`, account, amount, currency, createdAt: new Date().toISOString() };
}

/**
 * Listens on 127.0.0.1 and serves the parent: `cpu` answers the CPU used so far (user + system,
 * µs); `stats` answers `stats()` and the CPU used since the last `stats`.
 */
export async function serveParent(server: Server, close: () => Promise<void>, stats?: () => unknown): Promise<void> {
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  process.send?.({ port: (server.address() as AddressInfo).port });
  let lastCpu = process.cpuUsage();
  process.on('message', (message) => {
    if (message === 'cpu') {
      const { user, system } = process.cpuUsage();
      process.send?.({ cpuMicros: user + system });
      return;
    }
    if (message === 'stats') {
      const cpu = process.cpuUsage(lastCpu);
      lastCpu = process.cpuUsage();
      process.send?.({ stats: stats?.() ?? null, cpuMicros: cpu.user + cpu.system });
      return;
    }
    if (message !== 'stop') return;
    server.closeAllConnections();
    server.close();
    void close().finally(() => process.exit(0));
  });
  process.on('disconnect', () => process.exit(0));
}
