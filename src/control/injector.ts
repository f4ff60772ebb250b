import { ServiceError } from '../core/errors.js';

/**
 * The Kubernetes sidecar injector (DESIGN A.1, docs/kubernetes.md): a mutating admission webhook
 * that adds a govgate sidecar to each pod that asks for one (`govgate.io/inject: "true"`) and
 * points the pod's containers at it. Pure: an AdmissionReview in, an AdmissionReview out.
 */

export const INJECT_ANNOTATION = 'govgate.io/inject';
export const INJECTED_ANNOTATION = 'govgate.io/injected';
/** The Secret (key `token`) that holds the sidecar token (`POST /api/sidecars`). */
export const TOKEN_SECRET_ANNOTATION = 'govgate.io/sidecar-token-secret';
/** `"true"`: the containers also get HTTPS_PROXY through the sidecar's forward proxy. */
export const PROXY_ANNOTATION = 'govgate.io/proxy';

export const SIDECAR_NAME = 'govgate-sidecar';
const DATA_VOLUME = 'govgate-data';
const DEFAULT_SECRET = 'govgate-sidecar';
const API_PORT = 8620;
const PROXY_PORT = 15001;
const HEALTH_PORT = 15020;
const DATA_DIR = '/var/lib/govgate';
/**
 * Where the app containers find the sidecar's proxy CA certificate: a volume of its own that the
 * sidecar writes `ca.pem` to (SERVICE_PROXY_CA_EXPORT_DIR), read-only for them. The data volume,
 * with the sidecar's private keys, is the sidecar's alone.
 */
const CA_VOLUME = 'govgate-proxy-ca';
const CA_MOUNT = '/var/run/govgate-ca';
/** The image's user (numeric, so the kubelet can check runAsNonRoot). */
const IMAGE_UID = 1000;
const CONTROL_CA_VOLUME = 'govgate-control-ca';
const CONTROL_CA_DIR = '/etc/govgate/control-ca';

export interface InjectorSettings {
  /** The sidecar image (SERVICE_SIDECAR_IMAGE). */
  readonly image: string;
  /** The control plane URL the sidecars use (SERVICE_INJECT_CONTROL_URL). */
  readonly controlUrl: string;
  /**
   * A ConfigMap in the pod's namespace whose `ca.crt` the sidecars trust for an https control
   * plane (SERVICE_INJECT_CONTROL_CA_CONFIGMAP; a trust-manager Bundle, say). None: the image's roots.
   */
  readonly controlCaConfigMap?: string;
  /**
   * Inject a native sidecar (SERVICE_INJECT_NATIVE_SIDECAR, default true): the first init
   * container, `restartPolicy: Always`, with a startup probe. The kubelet starts the pod's own
   * containers only once that probe passes, so the gateway, the forward proxy and the CA file an
   * app reads when it starts (NODE_EXTRA_CA_CERTS is read once) are there first. False: a plain
   * container beside the app's, for clusters before Kubernetes 1.29.
   */
  readonly nativeSidecar?: boolean;
}

type JsonPatchOp = { op: 'add'; path: string; value: unknown };

interface Container {
  name?: string;
  env?: Array<{ name: string; value?: string }>;
  volumeMounts?: unknown[];
}

interface Pod {
  metadata?: { annotations?: Record<string, string>; name?: string; generateName?: string };
  spec?: { containers?: Container[]; initContainers?: Container[]; volumes?: unknown[] };
}

/** JSON Pointer escaping of one path segment (RFC 6901). */
function pointer(segment: string): string {
  return segment.replace(/~/g, '~0').replace(/\//g, '~1');
}

/**
 * The patch that injects the sidecar into `pod`, or undefined when the pod does not ask for one
 * or has one already.
 */
export function injectionPatch(pod: Pod, settings: InjectorSettings): JsonPatchOp[] | undefined {
  const annotations = pod.metadata?.annotations ?? {};
  if (annotations[INJECT_ANNOTATION] !== 'true') return undefined;
  const containers = pod.spec?.containers ?? [];
  const inits = pod.spec?.initContainers;
  if (
    annotations[INJECTED_ANNOTATION] === 'true' ||
    containers.some((c) => c.name === SIDECAR_NAME) ||
    inits?.some((c) => c.name === SIDECAR_NAME)
  )
    return undefined;
  const native = settings.nativeSidecar !== false;
  const secret = annotations[TOKEN_SECRET_ANNOTATION] || DEFAULT_SECRET;
  const proxy = annotations[PROXY_ANNOTATION] === 'true';
  const ops: JsonPatchOp[] = [];
  const base = `http://127.0.0.1:${API_PORT}`;
  const appEnv: Array<{ name: string; value: string }> = [
    { name: 'OPENAI_BASE_URL', value: `${base}/v1` },
    { name: 'ANTHROPIC_BASE_URL', value: base },
  ];
  if (proxy)
    appEnv.push(
      { name: 'NODE_EXTRA_CA_CERTS', value: `${CA_MOUNT}/ca.pem` },
      { name: 'SSL_CERT_FILE', value: `${CA_MOUNT}/ca.pem` },
      { name: 'REQUESTS_CA_BUNDLE', value: `${CA_MOUNT}/ca.pem` },
      { name: 'NO_PROXY', value: '127.0.0.1,localhost' },
    );
  if (proxy)
    // The agent key is the proxy credential; the pod keeps it (GOVGATE_AGENT_KEY, from its own
    // Secret), and Kubernetes expands $(…) from the variables listed before.
    appEnv.push({ name: 'HTTPS_PROXY', value: `http://agent:$(GOVGATE_AGENT_KEY)@127.0.0.1:${PROXY_PORT}` });
  containers.forEach((c, i) => {
    // A variable the pod sets itself is its own: these are added, never replaced.
    const has = new Set((c.env ?? []).map((e) => e.name));
    const add = appEnv.filter((e) => !has.has(e.name));
    if (c.env === undefined) {
      if (add.length > 0) ops.push({ op: 'add', path: `/spec/containers/${i}/env`, value: add });
    } else for (const e of add) ops.push({ op: 'add', path: `/spec/containers/${i}/env/-`, value: e });
    if (proxy) {
      const mount = { name: CA_VOLUME, mountPath: CA_MOUNT, readOnly: true };
      ops.push(
        c.volumeMounts === undefined
          ? { op: 'add', path: `/spec/containers/${i}/volumeMounts`, value: [mount] }
          : { op: 'add', path: `/spec/containers/${i}/volumeMounts/-`, value: mount },
      );
    }
  });
  const volumes: unknown[] = [{ name: DATA_VOLUME, emptyDir: {} }];
  if (proxy) volumes.push({ name: CA_VOLUME, emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } });
  const caMap = settings.controlCaConfigMap;
  if (caMap !== undefined)
    volumes.push({
      name: CONTROL_CA_VOLUME,
      configMap: { name: caMap, items: [{ key: 'ca.crt', path: 'ca.crt' }] },
    });
  if (pod.spec?.volumes === undefined) ops.push({ op: 'add', path: '/spec/volumes', value: volumes });
  else for (const v of volumes) ops.push({ op: 'add', path: '/spec/volumes/-', value: v });
  const sidecar = {
    name: SIDECAR_NAME,
    image: settings.image,
    args: ['sidecar'],
    env: [
      { name: 'SERVICE_CONTROL_URL', value: settings.controlUrl },
      { name: 'SERVICE_SIDECAR_TOKEN', valueFrom: { secretKeyRef: { name: secret, key: 'token' } } },
      { name: 'SERVICE_HOST', value: '127.0.0.1' },
      { name: 'SERVICE_PORT', value: String(API_PORT) },
      { name: 'SERVICE_PROXY_PORT', value: String(PROXY_PORT) },
      { name: 'SERVICE_DATA_DIR', value: `${DATA_DIR}/data` },
      { name: 'SERVICE_KEYS_DIR', value: `${DATA_DIR}/keys` },
      // The probes' listener: the API stays on loopback, where the kubelet's probes do not reach.
      { name: 'SERVICE_HEALTH_PORT', value: String(HEALTH_PORT) },
      { name: 'SERVICE_HEALTH_HOST', value: '0.0.0.0' },
      ...(proxy ? [{ name: 'SERVICE_PROXY_CA_EXPORT_DIR', value: CA_MOUNT }] : []),
      ...(caMap === undefined ? [] : [{ name: 'SERVICE_CONTROL_CA', value: `${CONTROL_CA_DIR}/ca.crt` }]),
    ],
    volumeMounts: [
      { name: DATA_VOLUME, mountPath: DATA_DIR },
      ...(proxy ? [{ name: CA_VOLUME, mountPath: CA_MOUNT }] : []),
      ...(caMap === undefined
        ? []
        : [{ name: CONTROL_CA_VOLUME, mountPath: CONTROL_CA_DIR, readOnly: true }]),
    ],
    ports: [{ name: 'govgate-health', containerPort: HEALTH_PORT }],
    ...(native
      ? {
          restartPolicy: 'Always',
          // The health listener opens last, once the gateway, the proxy and the CA file are up.
          startupProbe: {
            httpGet: { path: '/api/health/live', port: HEALTH_PORT },
            periodSeconds: 1,
            failureThreshold: 60,
          },
        }
      : {}),
    readinessProbe: { httpGet: { path: '/api/health/ready', port: HEALTH_PORT }, periodSeconds: 2 },
    livenessProbe: { httpGet: { path: '/api/health/live', port: HEALTH_PORT }, periodSeconds: 10 },
    securityContext: {
      runAsNonRoot: true,
      runAsUser: IMAGE_UID,
      runAsGroup: IMAGE_UID,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
    },
    resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '512Mi' } },
  };
  if (!native) ops.push({ op: 'add', path: '/spec/containers/-', value: sidecar });
  else if (inits === undefined) ops.push({ op: 'add', path: '/spec/initContainers', value: [sidecar] });
  // First, so the pod's own init containers already have the gateway and the proxy.
  else ops.push({ op: 'add', path: '/spec/initContainers/0', value: sidecar });
  if (pod.metadata?.annotations === undefined)
    ops.push({ op: 'add', path: '/metadata/annotations', value: { [INJECTED_ANNOTATION]: 'true' } });
  else ops.push({ op: 'add', path: `/metadata/annotations/${pointer(INJECTED_ANNOTATION)}`, value: 'true' });
  return ops;
}

/**
 * Answers an `admission.k8s.io/v1` AdmissionReview: always allowed (the injector never refuses a
 * pod; policy is govgate's business once the pod runs), with the patch when one applies.
 */
export function admissionResponse(review: unknown, settings: InjectorSettings): Record<string, unknown> {
  const r = review as {
    apiVersion?: unknown;
    kind?: unknown;
    request?: { uid?: unknown; kind?: { kind?: unknown }; object?: unknown };
  };
  if (
    r === null ||
    typeof r !== 'object' ||
    r.kind !== 'AdmissionReview' ||
    typeof r.request !== 'object' ||
    r.request === null ||
    typeof r.request.uid !== 'string'
  )
    throw new ServiceError(
      'invalid_request',
      'expected an admission.k8s.io/v1 AdmissionReview with a request',
    );
  const object = r.request.object;
  const isPod = r.request.kind?.kind === 'Pod' && typeof object === 'object' && object !== null;
  const patch = isPod ? injectionPatch(object as Pod, settings) : undefined;
  const response: Record<string, unknown> = { uid: r.request.uid, allowed: true };
  if (patch !== undefined) {
    response.patchType = 'JSONPatch';
    response.patch = Buffer.from(JSON.stringify(patch)).toString('base64');
  }
  return { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response };
}
