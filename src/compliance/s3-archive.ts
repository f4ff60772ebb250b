import { createHash, createHmac } from 'node:crypto';
import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { SignatureV4 } from '@smithy/signature-v4';
import type { JsonValue } from '../core/chain/index.js';
import { type ArchiveStore, RemoteArchiveStore } from './archive-store.js';
import { objectPath, objectRequest, rfc3986, xmlTexts } from './object-http.js';

export interface S3Settings {
  readonly bucket: string;
  readonly region: string;
  /**
   * An S3-compatible endpoint (MinIO, Ceph, R2…), addressed path-style (`<endpoint>/<bucket>/…`);
   * undefined for AWS itself, addressed virtual-hosted (`https://<bucket>.s3.<region>.amazonaws.com`).
   */
  readonly endpoint: string | undefined;
  /** Prepended to every key (`audit/` puts the files under `audit/<org>/…`); may be ''. */
  readonly prefix: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken: string | undefined;
}

/** The largest object one PUT may carry (S3's limit; larger ones need a multipart upload). */
const MAX_PUT_BYTES = 5 * 1024 ** 3;

/** SHA-256 and HMAC-SHA256 from node:crypto, in the shape the AWS signer asks for. */
class NodeSha256 {
  #hash: ReturnType<typeof createHash> | ReturnType<typeof createHmac>;
  readonly #secret: string | Uint8Array | undefined;

  constructor(secret?: string | ArrayBuffer | ArrayBufferView) {
    this.#secret =
      secret === undefined || typeof secret === 'string'
        ? secret
        : ArrayBuffer.isView(secret)
          ? new Uint8Array(secret.buffer, secret.byteOffset, secret.byteLength)
          : new Uint8Array(secret);
    this.#hash = this.#fresh();
  }

  #fresh(): ReturnType<typeof createHash> | ReturnType<typeof createHmac> {
    return this.#secret === undefined ? createHash('sha256') : createHmac('sha256', this.#secret);
  }

  update(data: string | ArrayBuffer | ArrayBufferView): void {
    this.#hash.update(
      typeof data === 'string'
        ? data
        : ArrayBuffer.isView(data)
          ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
          : new Uint8Array(data),
    );
  }

  digest(): Promise<Uint8Array> {
    return Promise.resolve(new Uint8Array(this.#hash.digest()));
  }

  reset(): void {
    this.#hash = this.#fresh();
  }
}

/** The AWS Signature V4 signer of S3 requests made with `s`'s credentials in its region. */
export function s3Signer(
  s: Pick<S3Settings, 'region' | 'accessKeyId' | 'secretAccessKey' | 'sessionToken'>,
): SignatureV4 {
  return new SignatureV4({
    service: 's3',
    region: s.region,
    credentials: {
      accessKeyId: s.accessKeyId,
      secretAccessKey: s.secretAccessKey,
      ...(s.sessionToken === undefined ? {} : { sessionToken: s.sessionToken }),
    },
    sha256: NodeSha256,
    // S3 signs the path as sent: its segments are encoded once (objectPath), not twice.
    uriEscapePath: false,
  });
}

/** The SHA-256 of no bytes: the payload hash of a GET. */
const EMPTY_SHA256 = createHash('sha256').digest('hex');

/**
 * `SERVICE_AUDIT_ARCHIVE=s3`: the archive files as objects `<prefix><org>/<file>` of one bucket,
 * each request signed with AWS Signature Version 4 (the AWS SDK's own signer). The payload of a
 * PUT is signed by its SHA-256, so the store refuses a body that changed on the way.
 */
export class S3ArchiveStore extends RemoteArchiveStore implements ArchiveStore {
  readonly type = 's3';
  readonly #s: S3Settings;
  readonly #signer: SignatureV4;
  readonly #origin: URL;

  /** `staging`: a local directory where files wait to be uploaded. */
  constructor(settings: S3Settings, staging: string) {
    super(staging, MAX_PUT_BYTES, 'one S3 PUT takes at most 5 GiB');
    this.#s = settings;
    this.#origin = new URL(
      settings.endpoint ?? `https://${settings.bucket}.s3.${settings.region}.amazonaws.com`,
    );
    this.#signer = s3Signer(settings);
  }

  get where(): Record<string, JsonValue> {
    const s = this.#s;
    return { bucket: s.bucket, region: s.region, endpoint: s.endpoint ?? null, prefix: s.prefix };
  }

  async list(folder: string): Promise<string[]> {
    const prefix = `${this.#s.prefix}${folder}/`;
    const names: string[] = [];
    let token: string | undefined;
    do {
      const query: Record<string, string> = { 'list-type': '2', prefix };
      if (token !== undefined) query['continuation-token'] = token;
      const res = await this.#send('GET', '', query, {});
      const xml = await res.body.text();
      for (const key of xmlTexts(xml, 'Key'))
        if (key.startsWith(prefix)) names.push(key.slice(prefix.length));
      token =
        xmlTexts(xml, 'IsTruncated')[0] === 'true' ? xmlTexts(xml, 'NextContinuationToken')[0] : undefined;
    } while (token !== undefined);
    return names.filter((n) => !n.includes('/'));
  }

  async read(folder: string, name: string): Promise<Readable> {
    const res = await this.#send('GET', `${this.#s.prefix}${folder}/${name}`, {}, {});
    return res.body;
  }

  protected async upload(
    folder: string,
    name: string,
    file: string,
    sha256: string,
    bytes: number,
  ): Promise<Record<string, JsonValue>> {
    const key = `${this.#s.prefix}${folder}/${name}`;
    const res = await this.#send(
      'PUT',
      key,
      {},
      { 'content-type': 'application/gzip', 'content-length': String(bytes) },
      sha256,
      createReadStream(file),
    );
    await res.body.dump();
    return { bucket: this.#s.bucket, key };
  }

  /** One signed request for `key` ('' for the bucket itself). */
  async #send(
    method: 'GET' | 'PUT',
    key: string,
    query: Record<string, string>,
    headers: Record<string, string>,
    payloadSha256 = EMPTY_SHA256,
    body?: Readable,
  ) {
    const origin = this.#origin;
    const base = origin.pathname.replace(/\/+$/, '');
    const bucketPath = this.#s.endpoint === undefined ? '' : `/${rfc3986(this.#s.bucket)}`;
    const path = `${base}${bucketPath}/${objectPath(key)}`;
    const signed = await this.#signer.sign({
      method,
      protocol: origin.protocol,
      hostname: origin.hostname,
      ...(origin.port === '' ? {} : { port: Number(origin.port) }),
      path,
      query,
      headers: { ...headers, host: origin.host, 'x-amz-content-sha256': payloadSha256 },
    });
    const search = Object.keys(query)
      .sort()
      .map((k) => `${rfc3986(k)}=${rfc3986(query[k] as string)}`)
      .join('&');
    return objectRequest(
      `S3 bucket ${this.#s.bucket}`,
      `${origin.origin}${path}${search === '' ? '' : `?${search}`}`,
      {
        method,
        headers: signed.headers as Record<string, string>,
        ...(body === undefined ? {} : { body }),
      },
    );
  }
}
