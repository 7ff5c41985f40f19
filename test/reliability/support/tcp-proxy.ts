/**
 * A TCP proxy between an app and PostgreSQL (or a client and an HTTP server), driven by the
 * test: it passes bytes through, refuses new connections, destroys the open ones, cuts a
 * connection the moment the client sends a given byte pattern (a PostgreSQL prepared
 * statement's name, say), or drops the answer to it. Listens on 127.0.0.1 only.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxyStats {
  /** Connections forwarded to the target. */
  accepted: number;
  /** Connections closed on arrival while refusing. */
  refused: number;
  /** Connections destroyed by {@link TcpProxy.destroyOpenSockets}. */
  destroyed: number;
  /** Connections cut by a drop rule, before the matching bytes reached the target. */
  dropped: number;
  /** Connections cut by a cut-after rule, once the matching bytes were forwarded. */
  cutAfter: number;
  /** Answers dropped by a drop-response rule (their connection cut as the answer arrived). */
  responsesDropped: number;
}

export interface TcpProxy {
  readonly port: number;
  readonly stats: Readonly<TcpProxyStats>;
  /** `url` with its host and port replaced by the proxy's. */
  urlFor(url: string): string;
  /** Forward new connections (the default). */
  passThrough(): void;
  /** Close every new connection as soon as it arrives (the database looks down). */
  refuseNewConnections(): void;
  /** Destroy every open connection, both sides; returns how many. */
  destroyOpenSockets(): number;
  /**
   * Cut any connection whose client sends `pattern` (matched across chunk boundaries), before
   * those bytes are forwarded: the statement never reaches the server.
   */
  dropWhenClientSends(pattern: string): void;
  /**
   * Cut any connection whose client sends `pattern` right after those bytes are forwarded: the
   * server receives the statement (and runs it), the client never sees the answer. The client's
   * bytes are still forwarded for 100 ms (the rest of the message), nothing is sent back.
   */
  cutAfterClientSends(pattern: string): void;
  /**
   * Once a connection's client has sent `pattern`, forward it, then drop the target's next bytes
   * on that connection (its answer) and cut both sides: the server received the request, ran it
   * and answered; the client never sees the answer. Applies to the next `times` matches (every
   * one by default). An HTTP client sees a connection closed before any response byte.
   */
  dropResponseAfterClientSends(pattern: string, options?: { times?: number }): void;
  clearDropRules(): void;
  close(): Promise<void>;
}

/** How long a cut-after rule keeps forwarding the client's bytes before it cuts. */
const CUT_AFTER_MS = 100;

interface Pair {
  client: Socket;
  upstream: Socket;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const stats: TcpProxyStats = { accepted: 0, refused: 0, destroyed: 0, dropped: 0, cutAfter: 0, responsesDropped: 0 };
  const open = new Set<Pair>();
  let refusing = false;
  let dropRules: Buffer[] = [];
  let cutAfterRules: Buffer[] = [];
  let dropResponseRules: Array<{ pattern: Buffer; left: number }> = [];

  const server: Server = createServer((client) => {
    client.on('error', () => {});
    if (refusing) {
      stats.refused++;
      client.destroy();
      return;
    }
    stats.accepted++;
    const upstream = connect(target.port, target.host);
    upstream.on('error', () => {});
    const pair: Pair = { client, upstream };
    open.add(pair);
    let flushing = false;
    const close = () => {
      open.delete(pair);
      client.destroy();
      // A cut-after rule ends the upstream side gracefully: the forwarded bytes must arrive.
      if (!flushing) upstream.destroy();
    };
    client.on('close', close);
    upstream.on('close', close);
    let cutting = false;
    let dropNextResponse = false;
    upstream.on('data', (chunk: Buffer) => {
      if (dropNextResponse) {
        stats.responsesDropped++;
        close();
        return;
      }
      if (!cutting) client.write(chunk);
    });
    let tail = Buffer.alloc(0);
    client.on('data', (chunk: Buffer) => {
      if (cutting) {
        upstream.write(chunk);
        return;
      }
      const window = Buffer.concat([tail, chunk]);
      if (dropRules.some((rule) => window.includes(rule))) {
        stats.dropped++;
        close();
        return;
      }
      if (cutAfterRules.some((rule) => window.includes(rule))) {
        // Forward this chunk and whatever follows for a moment (the rest of an extended-protocol
        // message, its Sync), but nothing back: then cut both sides.
        stats.cutAfter++;
        cutting = true;
        open.delete(pair);
        upstream.write(chunk);
        setTimeout(() => {
          flushing = true;
          upstream.end();
          client.destroy();
        }, CUT_AFTER_MS);
        return;
      }
      const dropResponse = dropResponseRules.find((rule) => rule.left > 0 && window.includes(rule.pattern));
      if (dropResponse) {
        dropResponse.left--;
        dropNextResponse = true;
      }
      const longest = Math.max(
        0,
        ...[...dropRules, ...cutAfterRules, ...dropResponseRules.map((rule) => rule.pattern)].map(
          (rule) => rule.length - 1,
        ),
      );
      tail = window.subarray(Math.max(0, window.length - longest));
      upstream.write(chunk);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  if (address === null || typeof address !== 'object') throw new Error('[idem] proxy: no address');
  const port = address.port;

  const destroyOpenSockets = () => {
    const pairs = [...open];
    for (const pair of pairs) {
      open.delete(pair);
      pair.client.destroy();
      pair.upstream.destroy();
    }
    stats.destroyed += pairs.length;
    return pairs.length;
  };

  return {
    port,
    stats,
    urlFor(url) {
      const parsed = new URL(url);
      parsed.hostname = '127.0.0.1';
      parsed.port = String(port);
      return parsed.toString();
    },
    passThrough: () => void (refusing = false),
    refuseNewConnections: () => void (refusing = true),
    destroyOpenSockets,
    dropWhenClientSends: (pattern) => void (dropRules = [...dropRules, Buffer.from(pattern)]),
    cutAfterClientSends: (pattern) => void (cutAfterRules = [...cutAfterRules, Buffer.from(pattern)]),
    dropResponseAfterClientSends: (pattern, { times = Infinity } = {}) =>
      void (dropResponseRules = [...dropResponseRules, { pattern: Buffer.from(pattern), left: times }]),
    clearDropRules: () => {
      dropRules = [];
      cutAfterRules = [];
      dropResponseRules = [];
    },
    async close() {
      destroyOpenSockets();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
