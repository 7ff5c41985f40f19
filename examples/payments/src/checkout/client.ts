/**
 * The checkout page's script, bundled for the browser by esbuild (see server.ts): a
 * `@trpc/client` with `idempotencyLink` from `@idem/trpc/client`, calling the payments API on
 * another origin. One key per payment, kept across the link's retries; the retention read from
 * the API's published policy; `Idempotent-Replayed` read from the responses (CORS-exposed); past
 * the retention, the key looked up (`reconcile: true`) instead of the payment sent again.
 */
import { createTRPCClient, httpLink, TRPCClientError } from '@trpc/client';
import {
  idempotencyHeaders,
  idempotencyLink,
  newIdempotencyKey,
  RetentionWindowExceededError,
  UnresolvedOperationError,
  type Reconciliation,
  type RetryNotice,
} from '@idem/trpc/client';
import type { PaymentsRouter } from '../trpc.ts';

const apiUrl = document.querySelector<HTMLMetaElement>('meta[name="api-url"]')!.content;
const form = document.querySelector<HTMLFormElement>('#pay-form')!;
const retryButton = document.querySelector<HTMLButtonElement>('#retry')!;
const result = document.querySelector<HTMLElement>('#result')!;
const log = document.querySelector<HTMLOListElement>('#log')!;

/** The keys whose answer carried `Idempotent-Replayed: true` (readable across origins only when exposed). */
const replayedKeys = new Set<string>();
let account = 'alice';

function note(text: string, kind = 'info'): void {
  const item = document.createElement('li');
  item.textContent = `${new Date().toISOString().slice(11, 23)}  ${text}`;
  item.dataset.kind = kind;
  log.append(item);
}

/** The link's fetch: every attempt, and what came back, on the page. */
const recordingFetch: typeof fetch = async (input, init) => {
  const key = new Headers(init?.headers).get('idempotency-key')?.replace(/^"|"$/g, '') ?? '';
  const method = init?.method ?? 'GET';
  note(
    `${method} ${new URL(String(input)).pathname}${key ? `  Idempotency-Key ${key}` : ''}`,
    method === 'POST' ? 'attempt' : 'lookup',
  );
  try {
    const response = await fetch(input, init);
    const replayed = response.headers.get('Idempotent-Replayed') === 'true';
    if (replayed) replayedKeys.add(key);
    note(
      `← ${response.status}${replayed ? ', Idempotent-Replayed: true' : ''}${response.headers.get('Retry-After') ? `, Retry-After: ${response.headers.get('Retry-After')}` : ''}`,
      replayed ? 'replayed' : 'answer',
    );
    return response;
  } catch (error) {
    note(`← no answer: ${error instanceof Error ? error.message : String(error)}`, 'lost');
    throw error;
  }
};

const trpc = createTRPCClient<PaymentsRouter>({
  links: [
    idempotencyLink({
      policyUrl: `${apiUrl}/idempotency`,
      // Past the retention the link sends nothing again: it asks `idempotency.status` what became of the key.
      reconcile: true,
      onRetry: (notice: RetryNotice) =>
        note(
          `retrying in ${Math.round(notice.delayMs)} ms with the same key (${notice.reason}), attempt ${notice.attempt}`,
          'retry',
        ),
    }),
    httpLink({
      url: `${apiUrl}/trpc`,
      fetch: recordingFetch,
      headers: ({ op }) => ({ ...idempotencyHeaders(op), authorization: `Bearer ${account}` }),
    }),
  ],
});

interface Payment {
  input: { amount: number; currency: string };
  key: string;
  firstAttemptAt: number;
}
let last: Payment | undefined;

function show(
  state: 'paying' | 'paid' | 'already-paid' | 'refused' | 'failed',
  text: string,
  extra: Record<string, string> = {},
): void {
  result.dataset.state = state;
  for (const name of ['replayed', 'code', 'key']) delete result.dataset[name];
  Object.assign(result.dataset, extra);
  result.textContent = text;
}

async function pay(payment: Payment): Promise<void> {
  show('paying', `Paying ${payment.input.amount} ${payment.input.currency}…`, { key: payment.key });
  try {
    const paid = await trpc.payments.create.mutate(payment.input, {
      context: { idempotencyKey: payment.key, idempotencyFirstAttemptAt: payment.firstAttemptAt },
    });
    const replayed = replayedKeys.has(payment.key);
    show(
      'paid',
      `Paid: ${paid.id}, ${paid.amount} ${paid.currency}.${replayed ? ' The answer was a replay (Idempotent-Replayed: true): the first attempt had charged, and was not charged again.' : ''}`,
      {
        replayed: String(replayed),
        key: payment.key,
      },
    );
  } catch (error) {
    const cause = error instanceof TRPCClientError ? error.cause : error;
    if (cause instanceof RetentionWindowExceededError && cause.reconciliation) {
      showReconciled(cause.reconciliation, payment);
    } else if (cause instanceof UnresolvedOperationError) {
      // The client refused to send the key again (past the published retention), or gave up.
      show('refused', `Not sent again: ${cause.message}`, { code: cause.code, key: payment.key });
    } else {
      show('failed', `Payment failed: ${error instanceof Error ? error.message : String(error)}`, { key: payment.key });
    }
  }
}

const hhmm = (at: Date) => `${String(at.getHours()).padStart(2, '0')}:${String(at.getMinutes()).padStart(2, '0')}`;

/** Past the retention: what the server says became of the payment, instead of paying again. */
function showReconciled(answer: Reconciliation, payment: Payment): void {
  const extra = { code: `reconciled_${answer.kind}`, key: payment.key };
  if (answer.kind === 'executed')
    show(
      'already-paid',
      `Already paid at ${hhmm(answer.at)} (${answer.status}): this payment went through, and was not sent again.`,
      extra,
    );
  else if (answer.kind === 'processing')
    show('refused', `Still processing since ${hhmm(answer.since)}: not sent again; look again in a moment.`, extra);
  else
    show('refused', 'The server has no record of this payment: nothing was charged. Pay again to send it anew.', extra);
}

form.addEventListener('submit', (event) => {
  event.preventDefault();
  const data = new FormData(form);
  account = String(data.get('account') || 'alice');
  last = {
    input: { amount: Number(data.get('amount')), currency: String(data.get('currency')) },
    key: newIdempotencyKey(),
    firstAttemptAt: Date.now(),
  };
  retryButton.disabled = false;
  note(`Pay ${last.input.amount} ${last.input.currency} as ${account}: key ${last.key}`);
  void pay(last);
});

// Sends the last payment again with its key and its first attempt's time, as a user coming back
// to a payment would: within the retention the server replays it; past it, the client sends
// nothing again and looks the key up instead ("Already paid at 10:42 (200)").
retryButton.addEventListener('click', () => {
  if (!last) return;
  note(`Send again: key ${last.key}, first sent ${new Date(last.firstAttemptAt).toISOString().slice(11, 23)}`);
  void pay(last);
});

document.body.dataset.ready = 'true';
