/**
 * One HTTP variant in its own process, so that the server and autocannon do not share an
 * event loop (on two cores, each gets one). Started by bench/http.ts with the config as JSON
 * in argv; answers `{ port }` over IPC once listening on 127.0.0.1, and closes on `'stop'`.
 */
import type { AddressInfo } from 'node:net';
import { createVariantServer, type ServerConfig } from './http-servers.ts';

const config = JSON.parse(process.argv[2] ?? '{}') as ServerConfig;
const { server, close } = await createVariantServer(config);
server.keepAliveTimeout = 30_000;
await new Promise<void>((resolve, reject) => {
  server.once('error', reject);
  server.listen(0, '127.0.0.1', resolve);
});
process.send?.({ port: (server.address() as AddressInfo).port });

process.on('message', (message) => {
  // The CPU this process has used so far (user + system, µs): the parent's per-request figure.
  if (message === 'cpu') {
    const { user, system } = process.cpuUsage();
    process.send?.({ cpuMicros: user + system });
    return;
  }
  if (message !== 'stop') return;
  server.closeAllConnections();
  server.close();
  void close().finally(() => process.exit(0));
});
// The parent going away (a crash, Ctrl-C) must not leave this process behind.
process.on('disconnect', () => process.exit(0));
