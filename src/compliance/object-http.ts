import type { Readable } from 'node:stream';
import { type Dispatcher, request } from 'undici';

/** An object store's refusal: its status and the error code of its XML body, never a credential. */
export class ObjectStoreError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ObjectStoreError';
  }
}

/** RFC 3986 percent-encoding, as S3's and Azure's canonical requests spell names and query values. */
export function rfc3986(text: string): string {
  return encodeURIComponent(text).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

/** The object path `a/b c` as a URL path: each segment encoded, the slashes kept. */
export function objectPath(key: string): string {
  return key.split('/').map(rfc3986).join('/');
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

/** The text of every `<tag>…</tag>` in `xml` (flat elements of a listing), entities decoded. */
export function xmlTexts(xml: string, tag: string): string[] {
  const out: string[] = [];
  const re = new RegExp(`<${tag}>([^<]*)</${tag}>`, 'g');
  for (let m = re.exec(xml); m !== null; m = re.exec(xml))
    out.push(
      (m[1] as string).replace(/&(#x[0-9a-fA-F]+|#[0-9]+|[a-z]+);/g, (all, e: string) =>
        e.startsWith('#x')
          ? String.fromCodePoint(Number.parseInt(e.slice(2), 16))
          : e.startsWith('#')
            ? String.fromCodePoint(Number(e.slice(1)))
            : (ENTITIES[e] ?? all),
      ),
    );
  return out;
}

/**
 * One request to an object store. A status of 300 or more is an ObjectStoreError naming the
 * store's error code and message (read from its XML body), so the caller's message says what
 * the store said without repeating the URL, whose query may hold a credential (an Azure SAS).
 */
export async function objectRequest(
  what: string,
  url: string,
  opts: {
    method: 'GET' | 'PUT';
    headers: Record<string, string>;
    body?: Readable;
    dispatcher?: Dispatcher;
  },
): Promise<Dispatcher.ResponseData> {
  const res = await request(url, {
    method: opts.method,
    headers: opts.headers,
    body: opts.body ?? null,
    ...(opts.dispatcher === undefined ? {} : { dispatcher: opts.dispatcher }),
  });
  if (res.statusCode < 300) return res;
  const text = (await res.body.text()).slice(0, 4096);
  const code = xmlTexts(text, 'Code')[0] ?? 'unknown';
  const message = xmlTexts(text, 'Message')[0]?.slice(0, 300) ?? '';
  throw new ObjectStoreError(
    res.statusCode,
    code,
    `${what} answered ${res.statusCode} ${code}${message === '' ? '' : `: ${message}`}`,
  );
}
