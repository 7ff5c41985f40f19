/**
 * One HTTP variant in its own process, so that the server and autocannon do not share an
 * event loop (on two cores, each gets one). Started by bench/http.ts with the config as JSON
 * in argv; the IPC protocol is bench/server-child.ts's.
 */
import { createVariantServer, type ServerConfig } from './http-servers.ts';
import { serveParent } from './server-child.ts';

const config = JSON.parse(process.argv[2] ?? '{}') as ServerConfig;
const { server, close } = await createVariantServer(config);
await serveParent(server, close);
