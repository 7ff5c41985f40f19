/**
 * An HTTP proxy in front of a server that lets the server do its work and then loses the
 * answer: for each of the next `count` requests it forwards the request, reads the server's
 * whole response (the server has charged and stored its outcome by then), and destroys the
 * client's connection without sending a byte of it. The client sees a network failure, as when
 * a response is lost on the way. Every request is recorded with its `Idempotency-Key`.
 * Listens on 127.0.0.1 only.
 */
import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ProxiedRequest {
  method: string;
  path: string;
  /** The `Idempotency-Key` header as sent, `undefined` without one. */
  idempotencyKey: string | undefined;
  /** The server's status; its answer reached the client only when `dropped` is false. */
  status: number;
  dropped: boolean;
  /** The server's `Idempotent-Replayed` header. */
  replayed: boolean;
}

export interface LossyProxy {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  /** Every request so far, in order. */
  readonly requests: readonly ProxiedRequest[];
  /**
   * Loses the server's answers to the next `count` requests (on top of any still pending), or
   * only to the next `count` requests for `path` (other requests pass).
   */
  dropNextResponses(count: number, path?: string): void;
  /** Loses no more answers. */
  stopDropping(): void;
  close(): Promise<void>;
}

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'content-length',
  'host',
  'upgrade',
  'proxy-connection',
]);

function endToEnd(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const kept: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers))
    if (value !== undefined && !HOP_BY_HOP.has(name)) kept[name] = value;
  return kept;
}

async function readAll(stream: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export async function startLossyProxy(target: string): Promise<LossyProxy> {
  const { hostname, port } = new URL(target);
  const requests: ProxiedRequest[] = [];
  let toDrop = 0;
  let dropPath: string | undefined;

  const server = createServer(async (req, res) => {
    try {
      const body = await readAll(req);
      const answer = await new Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }>(
        (resolve, reject) => {
          const upstream = httpRequest(
            {
              host: hostname,
              port: Number(port),
              method: req.method,
              path: req.url,
              headers: { ...endToEnd(req.headers), 'content-length': String(body.length) },
              agent: false,
            },
            (response) =>
              void readAll(response).then(
                (text) => resolve({ status: response.statusCode ?? 502, headers: response.headers, body: text }),
                reject,
              ),
          );
          upstream.once('error', reject);
          upstream.end(body);
        },
      );
      const dropped = toDrop > 0 && (dropPath === undefined || dropPath === req.url);
      if (dropped) toDrop -= 1;
      const key = req.headers['idempotency-key'];
      requests.push({
        method: req.method ?? 'GET',
        path: req.url ?? '/',
        idempotencyKey: Array.isArray(key) ? key.join(', ') : key,
        status: answer.status,
        dropped,
        replayed: answer.headers['idempotent-replayed'] === 'true',
      });
      if (dropped) {
        req.socket.destroy();
        return;
      }
      res
        .writeHead(answer.status, { ...endToEnd(answer.headers), 'content-length': String(answer.body.length) })
        .end(answer.body);
    } catch (error) {
      res
        .writeHead(502, { 'content-type': 'text/plain' })
        .end(`[lossy-proxy] ${error instanceof Error ? error.message : String(error)}`);
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${address.port}`,
    requests,
    dropNextResponses(count, path) {
      toDrop += count;
      dropPath = path;
    },
    stopDropping() {
      toDrop = 0;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
