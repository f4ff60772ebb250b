import * as dns from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { buildConnector } from 'undici';

/** Addresses no destination named through the API may resolve to. */
const BLOCKED = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8], // "this" network, unspecified
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  BLOCKED.addSubnet(net, bits, 'ipv4');
}
for (const [net, bits] of [
  ['::', 128], // unspecified
  ['::1', 128], // loopback
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['ff00::', 8], // multicast
  ['fd00:ec2::', 32], // AWS metadata over IPv6
  ['64:ff9b::', 96], // NAT64 (embeds IPv4)
  ['64:ff9b:1::', 48], // local-use NAT64 (RFC 8215)
  ['::', 96], // IPv4-compatible (deprecated; ::7f00:1 is 127.0.0.1 where it is translated)
  ['::ffff:0:0:0', 96], // IPv4-translated (SIIT)
  ['2002::', 16], // 6to4 (embeds IPv4)
  ['2001::', 32], // Teredo (embeds IPv4)
  ['fec0::', 10], // site-local (deprecated)
] as const) {
  BLOCKED.addSubnet(net, bits, 'ipv6');
}

/**
 * The IPv4 address of an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, how a dual-stack socket
 * names an IPv4 peer), if it is one: checked as that IPv4 address. Other IPv6 forms that embed one
 * are refused as IPv6 ranges (BLOCKED).
 */
function embeddedIpv4(address: string): string | undefined {
  const m = /^(?:0{1,4}:){0,5}(?:::)?ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (m) return m[1];
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (hex) {
    const hi = Number.parseInt(hex[1] as string, 16);
    const lo = Number.parseInt(hex[2] as string, 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return undefined;
}

/** Whether `address` is in a range no destination may reach (BLOCKED, then `deny`). */
export function isForbiddenAddress(address: string, deny?: BlockList): boolean {
  const family = isIP(address);
  if (family === 4) return BLOCKED.check(address, 'ipv4') || deny?.check(address, 'ipv4') === true;
  if (family === 6) {
    const v4 = embeddedIpv4(address);
    if (v4 !== undefined) return BLOCKED.check(v4, 'ipv4') || deny?.check(v4, 'ipv4') === true;
    return BLOCKED.check(address, 'ipv6') || deny?.check(address, 'ipv6') === true;
  }
  return true;
}

export type Resolver = (host: string) => Promise<string[]>;

/** What a refused connection fails with (see `EgressPolicy.connector`). */
export const EGRESS_FORBIDDEN = 'EGRESS_FORBIDDEN';

const FORBIDDEN_MESSAGE = 'resolves to a forbidden address';

/**
 * Where govgate may send what org admins configure (provider base URLs, tools): public addresses
 * only, unless the operator allows an exact `host:port` (`SERVICE_EGRESS_ALLOW`); and never the
 * ranges the operator denies (`SERVICE_EGRESS_DENY`: a cluster's pod, Service and node networks
 * when they use public or IPv6 global addresses).
 *
 * A URL is checked when it is configured (`check`), and every connection is checked again as it
 * is made (`connector`): the address checked is the address connected, so a name that resolves
 * to a public address for the check and to a private one for the connection (DNS rebinding), or
 * that is changed after it was configured, reaches nothing. Refusals do not say which address a
 * name resolved to: an org admin must not map the internal network through them.
 */
export class EgressPolicy {
  readonly #allow: ReadonlySet<string>;
  readonly #deny: BlockList | undefined;
  readonly #resolve: Resolver;

  /** `deny`: CIDRs (`10.0.0.0/8`, `2600:1f18::/32`) or addresses; throws on one it cannot read. */
  constructor(allow: readonly string[] = [], deny: readonly string[] = [], resolve?: Resolver) {
    this.#allow = new Set(allow);
    this.#deny = deny.length > 0 ? denyList(deny) : undefined;
    this.#resolve =
      resolve ??
      (async (host) =>
        (await dns.promises.lookup(host, { all: true, verbatim: true })).map((a) => a.address));
  }

  /** Whether the operator exempted `host:port` (host as in a URL: IPv6 in brackets). */
  allows(host: string, port: string): boolean {
    return this.#allow.has(`${host}:${port}`);
  }

  forbidden(address: string): boolean {
    return isForbiddenAddress(address, this.#deny);
  }

  /**
   * Checks a destination URL before it is kept or called: http(s) only, no credentials in the
   * URL, and every address its host resolves to must be allowed (see the class comment). Fails
   * closed: a name that does not resolve is refused. Returns a problem message, or undefined.
   */
  async check(raw: string): Promise<string | undefined> {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      return 'is not a valid URL';
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'must be an http or https URL';
    if (url.username || url.password) return 'must not carry credentials';
    const port = url.port || (url.protocol === 'https:' ? '443' : '80');
    const host = url.hostname;
    if (this.allows(host, port)) return undefined;
    const bare = host.startsWith('[') ? host.slice(1, -1) : host;
    let addresses: string[];
    if (isIP(bare)) addresses = [bare];
    else {
      try {
        addresses = await this.#resolve(bare);
      } catch {
        return notAllowed(host, port);
      }
    }
    if (addresses.length === 0) return notAllowed(host, port);
    for (const a of addresses) if (this.forbidden(a)) return notAllowed(host, port);
    return undefined;
  }

  /**
   * An undici connector that refuses, as it connects, an address the policy forbids: an IP
   * literal before connecting, a name through the lookup the connection itself uses (each of its
   * addresses). `host:port` pairs the operator allowed connect as they are. The error's `code` is
   * EGRESS_FORBIDDEN.
   */
  connector(timeoutMs: number): buildConnector.connector {
    const open = buildConnector({ timeout: timeoutMs });
    const guarded = buildConnector({ timeout: timeoutMs, lookup: this.lookup });
    return (opts, callback) => {
      const port = opts.port || (opts.protocol === 'https:' ? '443' : '80');
      const host = isIP(opts.hostname) === 6 ? `[${opts.hostname}]` : opts.hostname;
      if (this.allows(host, port)) return open(opts, callback);
      if (isIP(opts.hostname) !== 0 && this.forbidden(opts.hostname)) return callback(forbiddenError(), null);
      return guarded(opts, callback);
    };
  }

  /** net.connect's lookup, refusing a name any of whose addresses is forbidden. */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, '', 0);
      if (addresses.length === 0 || addresses.some((a) => this.forbidden(a.address)))
        return callback(forbiddenError(), '', 0);
      if (options.all === true)
        return (callback as (e: null, a: dns.LookupAddress[]) => void)(null, addresses);
      const first = addresses[0] as dns.LookupAddress;
      callback(null, first.address, first.family);
    });
  };
}

/**
 * One refusal for a name that does not resolve and for one that resolves to a forbidden address:
 * told apart, they would let an org admin learn which internal names exist (other tenants'
 * services among them).
 */
function notAllowed(host: string, port: string): string {
  return `is not an allowed destination (it does not resolve, or ${FORBIDDEN_MESSAGE}); an operator can allow it with SERVICE_EGRESS_ALLOW=${host}:${port}`;
}

function forbiddenError(): NodeJS.ErrnoException {
  return Object.assign(new Error(`egress refused: the destination ${FORBIDDEN_MESSAGE}`), {
    code: EGRESS_FORBIDDEN,
  });
}

/** The operator's denied ranges (`SERVICE_EGRESS_DENY`). */
function denyList(entries: readonly string[]): BlockList {
  const list = new BlockList();
  for (const entry of entries) {
    const [net, bits, extra] = entry.trim().split('/');
    const family = isIP(net ?? '');
    const prefix = bits === undefined ? (family === 6 ? 128 : 32) : Number(bits);
    if (
      family === 0 ||
      extra !== undefined ||
      (bits !== undefined && !/^\d{1,3}$/.test(bits)) ||
      prefix > (family === 6 ? 128 : 32)
    )
      throw new Error(`not an address or CIDR range: ${entry}`);
    list.addSubnet(net as string, prefix, family === 6 ? 'ipv6' : 'ipv4');
  }
  return list;
}

/** The origin a URL sends to (the string itself when it is not a URL: egress checks refuse it). */
export function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}
