import { createHash } from 'node:crypto';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { s3Signer } from '../../src/compliance/s3-archive.js';

/**
 * An object store on 127.0.0.1 for the archive tests, speaking the parts of the S3 API (bucket
 * `bucket`, path-style, every request's Signature V4 checked against `secretAccessKey`, a PUT's
 * payload against its signed SHA-256) and of the Azure Blob API (container `container`, a SAS
 * whose `sig` must be `sas`) that the archive uses: list, get and put. Objects live in `objects`
 * by their full key (`<bucket>/<key>` or `<container>/<name>`).
 */
export interface MockObjectStore {
  readonly url: string;
  readonly objects: Map<string, Buffer>;
  /** Every request: method, path with query, and the status answered. */
  readonly requests: { method: string; url: string; status: number }[];
  /** The next puts are refused with this status (an S3 AccessDenied / Azure AuthorizationFailure). */
  refusePuts: number | undefined;
  close(): Promise<void>;
}

export const S3_CREDENTIALS = {
  accessKeyId: 'AKIDTESTARCHIVE0001',
  secretAccessKey: 'test/secret+ARCHIVE/key0000000000000000000',
  region: 'eu-west-1',
};
export const BLOB_SIG = 'testsig%2Bvalue%3D';

function xmlEscape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function xmlError(code: string, message: string): string {
  return `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${xmlEscape(message)}</Message></Error>`;
}

export async function startMockObjectStore(): Promise<MockObjectStore> {
  const objects = new Map<string, Buffer>();
  const requests: MockObjectStore['requests'] = [];
  const signer = s3Signer({ ...S3_CREDENTIALS, sessionToken: undefined });
  const state = { refusePuts: undefined as number | undefined };

  const s3 = async (
    req: http.IncomingMessage,
    body: Buffer,
    url: URL,
  ): Promise<[number, string | Buffer]> => {
    const query: Record<string, string> = {};
    for (const [k, v] of url.searchParams) query[k] = v;
    const headers: Record<string, string> = {};
    for (const name of ['host', 'x-amz-date', 'x-amz-content-sha256', 'content-type', 'content-length'])
      if (typeof req.headers[name] === 'string') headers[name] = req.headers[name] as string;
    const auth = req.headers.authorization ?? '';
    const signedNames = /SignedHeaders=([^,]+)/.exec(auth)?.[1]?.split(';') ?? [];
    for (const name of Object.keys(headers)) if (!signedNames.includes(name)) delete headers[name];
    const amzDate = req.headers['x-amz-date'] as string;
    const date = new Date(
      `${amzDate.slice(0, 4)}-${amzDate.slice(4, 6)}-${amzDate.slice(6, 8)}T${amzDate.slice(9, 11)}:${amzDate.slice(11, 13)}:${amzDate.slice(13, 15)}Z`,
    );
    const expected = await signer.sign(
      {
        method: req.method as string,
        protocol: 'http:',
        hostname: url.hostname,
        port: Number(url.port),
        path: url.pathname,
        query,
        headers,
      },
      { signingDate: date },
    );
    if (expected.headers.authorization !== auth)
      return [403, xmlError('SignatureDoesNotMatch', 'bad signature')];
    const payload = createHash('sha256').update(body).digest('hex');
    if (req.headers['x-amz-content-sha256'] !== payload)
      return [400, xmlError('XAmzContentSHA256Mismatch', 'the payload does not match its hash')];
    const [, bucket, ...rest] = decodeURIComponent(url.pathname).split('/');
    if (bucket !== 'archive-bucket') return [404, xmlError('NoSuchBucket', 'no such bucket')];
    const key = rest.join('/');
    if (req.method === 'GET' && key === '') {
      const prefix = query.prefix ?? '';
      const keys = [...objects.keys()]
        .filter((k) => k.startsWith(`${bucket}/${prefix}`))
        .map((k) => k.slice(bucket.length + 1))
        .sort();
      // Two keys a page, so the listing's continuation is exercised.
      const start = query['continuation-token'] === undefined ? 0 : Number(query['continuation-token']);
      const page = keys.slice(start, start + 2);
      const more = start + 2 < keys.length;
      return [
        200,
        `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>${bucket}</Name><Prefix>${xmlEscape(prefix)}</Prefix>${page
          .map((k) => `<Contents><Key>${xmlEscape(k)}</Key></Contents>`)
          .join(
            '',
          )}<IsTruncated>${more}</IsTruncated>${more ? `<NextContinuationToken>${start + 2}</NextContinuationToken>` : ''}</ListBucketResult>`,
      ];
    }
    return object(req.method as string, `${bucket}/${key}`, body);
  };

  const blob = (req: http.IncomingMessage, body: Buffer, url: URL): [number, string | Buffer] => {
    if (url.searchParams.get('sig') !== decodeURIComponent(BLOB_SIG))
      return [403, xmlError('AuthenticationFailed', 'Signature did not match')];
    const [, container, ...rest] = decodeURIComponent(url.pathname).split('/');
    if (container !== 'archive-container') return [404, xmlError('ContainerNotFound', 'no such container')];
    const name = rest.join('/');
    if (req.method === 'GET' && url.searchParams.get('comp') === 'list') {
      const prefix = url.searchParams.get('prefix') ?? '';
      const names = [...objects.keys()]
        .filter((k) => k.startsWith(`${container}/${prefix}`))
        .map((k) => k.slice(container.length + 1))
        .sort();
      const start = Number(url.searchParams.get('marker') ?? '0');
      const page = names.slice(start, start + 2);
      const next = start + 2 < names.length ? String(start + 2) : '';
      return [
        200,
        `<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Blobs>${page
          .map((n) => `<Blob><Name>${xmlEscape(n)}</Name></Blob>`)
          .join('')}</Blobs><NextMarker>${next}</NextMarker></EnumerationResults>`,
      ];
    }
    if (req.method === 'PUT' && req.headers['x-ms-blob-type'] !== 'BlockBlob')
      return [400, xmlError('MissingRequiredHeader', 'x-ms-blob-type')];
    return object(req.method as string, `${container}/${name}`, body);
  };

  const object = (method: string, key: string, body: Buffer): [number, string | Buffer] => {
    if (method === 'PUT') {
      if (state.refusePuts !== undefined)
        return [state.refusePuts, xmlError('AccessDenied', 'Access Denied')];
      objects.set(key, body);
      return [200, ''];
    }
    const found = objects.get(key);
    return found === undefined
      ? [404, xmlError('NoSuchKey', 'The specified key does not exist.')]
      : [200, found];
  };

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const url = new URL(req.url ?? '/', `http://${req.headers.host}`);
      const answer = url.pathname.startsWith('/archive-container')
        ? blob(req, body, url)
        : s3(req, body, url);
      void Promise.resolve(answer).then(
        ([status, out]) => {
          requests.push({ method: req.method as string, url: req.url ?? '', status });
          res.writeHead(status, {
            'content-type':
              status === 200 && Buffer.isBuffer(out) ? 'application/octet-stream' : 'application/xml',
          });
          res.end(out);
        },
        (err: Error) => {
          res.writeHead(500);
          res.end(err.message);
        },
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    objects,
    requests,
    get refusePuts() {
      return state.refusePuts;
    },
    set refusePuts(v: number | undefined) {
      state.refusePuts = v;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
