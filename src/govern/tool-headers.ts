/**
 * The headers an org admin may configure on an HTTP tool (`PUT /api/settings/tools`), checked
 * when they are configured. undici refuses most bad ones only when a call sends them, after the
 * call's mandate is used up and `tool.execution_started` written, and then as "tool X is
 * unreachable"; and it sends a configured `Host` as given, which would let a tool address another
 * virtual host behind an allowed address and pass Host checks that guard internal services.
 */

/** An RFC 9110 token (section 5.6.2): what a field name is. */
const TOKEN_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * RFC 9110 field-value characters (section 5.5): visible ASCII, space, tab and obs-text
 * (0x80-0xFF); never CR, LF, NUL or another control character. Node and undici allow the same.
 */
const FIELD_VALUE_RE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** Framing and hop-by-hop headers, and Host: undici's to set from the request, never a tool's. */
const RESERVED = new Set([
  'host',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'expect',
  'content-length',
]);

/** Why header `name: value` cannot be configured on a tool; undefined when it can. */
export function toolHeaderProblem(name: string, value: string): string | undefined {
  if (!TOKEN_RE.test(name))
    return `header name ${JSON.stringify(name)} is not an RFC 9110 token (letters, digits and !#$%&'*+-.^_\`|~)`;
  const lower = name.toLowerCase();
  if (RESERVED.has(lower) || lower.startsWith('proxy-'))
    return `header ${name} cannot be configured: host, connection, keep-alive, transfer-encoding, te, trailer, upgrade, expect, content-length and proxy-* are set for each call, never by a tool`;
  if (!FIELD_VALUE_RE.test(value))
    return `header ${name} has a character a header value cannot hold (CR, LF, NUL, another control character, or one above U+00FF)`;
  return undefined;
}
