import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import type { JsonValue } from '../core/chain/index.js';
import { type ArchiveStore, RemoteArchiveStore } from './archive-store.js';
import { objectPath, objectRequest, rfc3986, xmlTexts } from './object-http.js';

/** The Blob service version asked for: one whose Put Blob takes up to 5,000 MiB. */
const BLOB_API_VERSION = '2021-12-02';
const MAX_PUT_BYTES = 5000 * 1024 ** 2;

/**
 * `SERVICE_AUDIT_ARCHIVE=blob`: the archive files as block blobs `<org>/<file>` of one Azure
 * storage container, reached with a container SAS URL (`https://<account>.blob.core.windows.net/
 * <container>?sv=…&sig=…`, with read, write and list permissions). The SAS is a credential: it is
 * sent only in requests, never shown (`where` names the container without it) nor put in a
 * message.
 */
export class BlobArchiveStore extends RemoteArchiveStore implements ArchiveStore {
  readonly type = 'blob';
  /** The container's URL without its query. */
  readonly #container: string;
  readonly #sas: string;

  constructor(containerSasUrl: string, staging: string) {
    super(staging, MAX_PUT_BYTES, 'one Put Blob takes at most 5,000 MiB');
    const url = new URL(containerSasUrl);
    this.#sas = url.search.slice(1);
    url.search = '';
    url.hash = '';
    this.#container = url.href.replace(/\/+$/, '');
  }

  get where(): Record<string, JsonValue> {
    return { container: this.#container };
  }

  async list(folder: string): Promise<string[]> {
    const prefix = `${folder}/`;
    const names: string[] = [];
    let marker = '';
    do {
      const query = `restype=container&comp=list&prefix=${rfc3986(prefix)}${marker === '' ? '' : `&marker=${rfc3986(marker)}`}`;
      const res = await this.#send('GET', `${this.#container}?${query}&${this.#sas}`, {});
      const xml = await res.body.text();
      for (const name of xmlTexts(xml, 'Name'))
        if (name.startsWith(prefix)) names.push(name.slice(prefix.length));
      marker = xmlTexts(xml, 'NextMarker')[0] ?? '';
    } while (marker !== '');
    return names.filter((n) => !n.includes('/'));
  }

  async read(folder: string, name: string): Promise<Readable> {
    return (await this.#send('GET', this.#blobUrl(folder, name), {})).body;
  }

  protected async upload(
    folder: string,
    name: string,
    file: string,
    _sha256: string,
    bytes: number,
  ): Promise<Record<string, JsonValue>> {
    const res = await this.#send(
      'PUT',
      this.#blobUrl(folder, name),
      { 'x-ms-blob-type': 'BlockBlob', 'content-type': 'application/gzip', 'content-length': String(bytes) },
      createReadStream(file),
    );
    await res.body.dump();
    return { container: this.#container, blob: `${folder}/${name}` };
  }

  #blobUrl(folder: string, name: string): string {
    return `${this.#container}/${objectPath(`${folder}/${name}`)}?${this.#sas}`;
  }

  #send(method: 'GET' | 'PUT', url: string, headers: Record<string, string>, body?: Readable) {
    return objectRequest(`blob container ${this.#container}`, url, {
      method,
      headers: { ...headers, 'x-ms-version': BLOB_API_VERSION },
      ...(body === undefined ? {} : { body }),
    });
  }
}
