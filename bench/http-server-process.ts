/**
 * One HTTP variant in its own process, so that the server and autocannon do not share an
 * event loop (on two cores, each gets one). Started by bench/http.ts with the config as JSON
 * in argv; the IPC protocol is bench/server-child.ts's.
 */
import { appendFileSync } from 'node:fs';
import { createVariantServer, poolProbes, type ServerConfig } from './http-servers.ts';
import { serveParent } from './server-child.ts';

const config = JSON.parse(process.argv[2] ?? '{}') as ServerConfig;
const { server, close } = await createVariantServer(config);
const probeFile = process.env.BENCH_POOL_PROBE;
if (probeFile && poolProbes.length > 0) {
  // The parent asks for 'cpu' before and after each load: the line after a load is its statements.
  process.on('message', (message) => {
    if (message !== 'cpu') return;
    const stats = poolProbes.map((probe) => probe.take());
    appendFileSync(probeFile, `${JSON.stringify({ variant: config.variant, stats })}\n`);
  });
}
await serveParent(server, close);
