/** What a test sends: a method (default GET, or POST with a body), a bearer token, headers, a body. */
export interface CallInit {
  readonly method?: string;
  readonly token?: string;
  readonly headers?: Record<string, string>;
  /** The request body as sent (JSON unless a content-type header says otherwise). */
  readonly body?: string;
}

/** One request against a test server; the answer's body parsed as JSON when it is JSON. */
export async function callHttp(
  url: string,
  init: CallInit,
): Promise<{ status: number; headers: Headers; body: unknown; text: string }> {
  const headers: Record<string, string> = { ...init.headers };
  if (init.token !== undefined) headers.authorization = `Bearer ${init.token}`;
  if (init.body !== undefined) headers['content-type'] ??= 'application/json';
  const res = await fetch(url, {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers,
    body: init.body,
  });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, headers: res.headers, body, text };
}
