import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

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
] as const) {
  BLOCKED.addSubnet(net, bits, 'ipv6');
}

/** The IPv4 address embedded in an IPv4-mapped or -compatible IPv6 address, if any. */
function embeddedIpv4(address: string): string | undefined {
  const m =
    /^(?:0*:)*(?:::)?(?:ffff:)?(\d+\.\d+\.\d+\.\d+)$/i.exec(address) ??
    /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (m) return m[1];
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (hex) {
    const hi = Number.parseInt(hex[1] as string, 16);
    const lo = Number.parseInt(hex[2] as string, 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return undefined;
}

export function isForbiddenAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return BLOCKED.check(address, 'ipv4');
  if (family === 6) {
    const v4 = embeddedIpv4(address);
    if (v4 !== undefined) return BLOCKED.check(v4, 'ipv4');
    return BLOCKED.check(address, 'ipv6');
  }
  return true;
}

export type Resolver = (host: string) => Promise<string[]>;

const systemResolver: Resolver = async (host) =>
  (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

/**
 * Checks a destination URL before anything is sent to it: http(s) only, no credentials in the
 * URL, and every address its host resolves to must be public — unless the exact `host:port` is in
 * the operator's allow list. Fails closed: a name that does not resolve is refused.
 * Returns a problem message, or undefined when the URL is acceptable.
 */
export async function checkEgressUrl(
  raw: string,
  allow: readonly string[],
  resolve: Resolver = systemResolver,
): Promise<string | undefined> {
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
  if (allow.includes(`${host}:${port}`)) return undefined;
  const bare = host.startsWith('[') ? host.slice(1, -1) : host;
  let addresses: string[];
  if (isIP(bare)) addresses = [bare];
  else {
    try {
      addresses = await resolve(bare);
    } catch {
      return `host ${host} does not resolve`;
    }
  }
  if (addresses.length === 0) return `host ${host} does not resolve`;
  for (const a of addresses) {
    if (isForbiddenAddress(a))
      return `resolves to a forbidden address (${a}); allow it with SERVICE_EGRESS_ALLOW=${host}:${port}`;
  }
  return undefined;
}

/** The origin a URL sends to (the string itself when it is not a URL: egress checks refuse it). */
export function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}
