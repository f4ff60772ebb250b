import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { errorBody, isServiceError, ServiceError } from '../core/errors.js';
import { loadTlsFiles } from '../http/tls.js';
import { type TlsReloader, type TlsReloadOptions, watchTlsFiles } from '../http/tls-reload.js';
import type { Logger } from '../util/log.js';
import { admissionResponse, type InjectorSettings } from './injector.js';

/** An AdmissionReview of a pod is a few KiB; anything much larger is not one. */
const MAX_REVIEW_BYTES = 1024 * 1024;

export interface RunningInjector {
  readonly port: number;
  /** Its certificate files, watched for a renewal (tls-reload.ts). */
  readonly tlsReload: TlsReloader;
  close(): Promise<void>;
}

/**
 * The sidecar injector's HTTPS listener (`SERVICE_INJECTOR_PORT`): `POST /mutate` answers an
 * AdmissionReview (injector.ts). The Kubernetes API server calls it over TLS with the certificate
 * the webhook configuration's `caBundle` trusts; it needs no credential, because it only computes
 * a patch from the pod it is shown: it reads no state and writes none.
 */
export async function startInjector(
  opts: {
    host: string;
    port: number;
    certFile: string;
    keyFile: string;
    settings: InjectorSettings;
    /** The renewal watch's metric and interval (watchTlsFiles). */
    tlsReload?: Pick<TlsReloadOptions, 'counted' | 'intervalMs'>;
  },
  logger: Logger,
): Promise<RunningInjector> {
  const files = loadTlsFiles(opts.certFile, opts.keyFile);
  const server: Server = createServer({
    cert: files.cert,
    key: files.key,
    minVersion: 'TLSv1.2',
  });
  server.on('request', (req, res) => {
    const answer = (status: number, body: unknown): void => {
      const text = JSON.stringify(body);
      res.writeHead(status, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(text),
      });
      res.end(text);
    };
    const fail = (err: unknown): void => {
      const e = isServiceError(err)
        ? err
        : new ServiceError('internal_error', 'internal error', { cause: err });
      if (!isServiceError(err)) logger.error('injector failed', { error: String(err) });
      answer(e.status, errorBody(e.code, e.message, '', e.param));
    };
    const path = (req.url ?? '').split('?', 1)[0];
    const refuse = (e: ServiceError): void => {
      // Read what was sent before answering, or the client may meet a reset instead of the answer.
      req.resume();
      req.on('end', () => fail(e));
    };
    if (path !== '/mutate')
      return refuse(new ServiceError('not_found', `no route for ${req.method} ${path}`));
    if (req.method !== 'POST')
      return refuse(new ServiceError('method_not_allowed', 'POST an AdmissionReview'));
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= MAX_REVIEW_BYTES) chunks.push(c);
    });
    req.on('end', () => {
      try {
        if (size > MAX_REVIEW_BYTES)
          throw new ServiceError('payload_too_large', 'an AdmissionReview is at most 1 MiB');
        let review: unknown;
        try {
          review = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          throw new ServiceError('invalid_json', 'the body is not JSON');
        }
        answer(200, admissionResponse(review, opts.settings));
      } catch (err) {
        fail(err);
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  // A renewed certificate is served to the API server's next connections.
  const tlsReload = watchTlsFiles({
    ...opts.tlsReload,
    listener: 'injector',
    initial: files,
    apply: (renewed) =>
      server.setSecureContext({ cert: renewed.cert, key: renewed.key, minVersion: 'TLSv1.2' }),
    logger,
  });
  return {
    port: (server.address() as AddressInfo).port,
    tlsReload,
    close: () =>
      new Promise<void>((resolve) => {
        tlsReload.stop();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
