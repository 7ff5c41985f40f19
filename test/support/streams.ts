/**
 * Request bodies as a client streams them: chunked, without `Content-Length` (E2, the 413 of a
 * body over the limit as it streams in). Shared by the Fetch adapter's and the example's tests.
 */

/** `text` as a stream of `chunkBytes`-byte chunks (the last one shorter), read as the server pulls. */
export function streamOf(text: string, chunkBytes = 1024): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= bytes.byteLength) return controller.close();
      controller.enqueue(bytes.subarray(offset, offset + chunkBytes));
      offset += chunkBytes;
    },
  });
}
