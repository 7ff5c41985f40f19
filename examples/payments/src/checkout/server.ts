/**
 * The checkout page: a plain HTML page and its script (client.ts, bundled for the browser with
 * esbuild), served by a server of its own, on another origin than the API it calls — the way a
 * shop's front end and a payments API usually live. The API must allow this origin (CORS_ORIGIN).
 */
import { createServer, type Server } from 'node:http';
import { fileURLToPath } from 'node:url';
import { escapeHtml } from '@idem/core/http';
import { build } from 'esbuild';

const CLIENT_ENTRY = fileURLToPath(new URL('./client.ts', import.meta.url));

/** Bundles client.ts for browsers: @trpc/client and @idem/trpc/client, no Node modules. */
export async function bundleCheckoutScript(): Promise<string> {
  const output = await build({
    entryPoints: [CLIENT_ENTRY],
    bundle: true,
    write: false,
    platform: 'browser',
    format: 'esm',
    target: 'es2022',
    logLevel: 'silent',
    legalComments: 'none',
  });
  return output.outputFiles[0]!.text;
}

export interface CheckoutServerOptions {
  /** The payments API the page calls (`http://localhost:3000`), read on every page load. */
  apiUrl: () => string;
}

/** The checkout server: `/` the page, `/checkout.js` its script. The script is bundled before it returns. */
export async function createCheckoutServer({ apiUrl }: CheckoutServerOptions): Promise<Server> {
  const script = await bundleCheckoutScript();
  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
    } else if (path === '/') {
      send(res, 'text/html; charset=utf-8', checkoutPage(apiUrl()));
    } else if (path === '/checkout.js') {
      send(res, 'text/javascript; charset=utf-8', script);
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    }
  });
}

function send(res: import('node:http').ServerResponse, type: string, body: string): void {
  res.writeHead(200, { 'content-type': type, 'content-length': Buffer.byteLength(body), 'cache-control': 'no-store' });
  res.end(body);
}

function checkoutPage(apiUrl: string): string {
  const attribute = escapeHtml(apiUrl);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Checkout · payments example</title>
<meta name="api-url" content="${attribute}">
<style>
body { font: 15px/1.45 system-ui, sans-serif; margin: 32px; color: #111827; max-width: 820px; }
form { display: grid; grid-template-columns: repeat(3, auto) 1fr; gap: 10px 14px; align-items: end; }
label { display: grid; gap: 3px; font-size: 13px; color: #374151; }
input { font: inherit; padding: 5px 8px; border: 1px solid #d1d5db; border-radius: 5px; width: 9em; }
.buttons { grid-column: 1 / -1; display: flex; gap: 10px; }
button { font: inherit; padding: 7px 16px; border-radius: 6px; border: 1px solid #1d4ed8; background: #2563eb; color: #fff; cursor: pointer; }
button#retry { background: #fff; color: #1d4ed8; }
button:disabled { opacity: .5; cursor: default; }
#result { margin: 18px 0; padding: 12px 14px; border-radius: 6px; background: #f3f4f6; min-height: 1.4em; overflow-wrap: anywhere; }
#result[data-state="paid"], #result[data-state="already-paid"] { background: #dcfce7; }
#result[data-state="refused"] { background: #fef3c7; }
#result[data-state="failed"] { background: #fee2e2; }
#log { font: 12px/1.6 ui-monospace, monospace; color: #374151; padding-left: 1.4em; overflow-wrap: anywhere; }
#log [data-kind="lost"] { color: #b91c1c; } #log [data-kind="replayed"] { color: #15803d; } #log [data-kind="retry"] { color: #b45309; } #log [data-kind="lookup"] { color: #1d4ed8; }
.api { color: #6b7280; font-size: 13px; }
</style></head>
<body>
<h1>Checkout</h1>
<p class="api">Payments API: <code>${attribute}</code> (another origin: CORS)</p>
<form id="pay-form">
  <label>Account <input name="account" value="alice" autocomplete="off"></label>
  <label>Amount (minor units) <input name="amount" type="number" min="1" value="4200"></label>
  <label>Currency <input name="currency" value="EUR" maxlength="3"></label>
  <div class="buttons"><button id="pay" type="submit">Pay</button><button id="retry" type="button" disabled>Send the last payment again</button></div>
</form>
<section id="result" role="status" aria-live="polite"></section>
<ol id="log"></ol>
<script type="module" src="/checkout.js"></script>
</body></html>
`;
}
