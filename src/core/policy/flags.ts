// X-Service-Flags: parsing, and merging under the org policy (tighten only, unless unlocked).
//   mode=enforce, pii=mask, secrets=block, tools=denylist:shell.exec:fs.write,
//   tools=allowlist:a:b, budget=5.00

import { compileNameMatcher } from './glob.js';
import {
  type CompiledPolicy,
  type ContentAction,
  type EffectiveFlags,
  MODES,
  type Mode,
  type Problem,
  type ServiceFlags,
} from './types.js';

export const MAX_FLAGS_LENGTH = 4096;
const MAX_TOOLS = 256;
const BUDGET = /^\d{1,9}(\.\d{1,6})?$/;
const TOOL_NAME = /^[^\s,:=]{1,256}$/;

const MODE_ORDER: Readonly<Record<Mode, number>> = { observe: 0, warn: 1, enforce: 2, lockdown: 3 };
const CONTENT_ORDER: Readonly<Record<ContentAction, number>> = { off: 0, flag: 1, redact: 2, block: 3 };
const CONTENT_WORDS: Readonly<Record<string, ContentAction>> = {
  off: 'off',
  flag: 'flag',
  mask: 'redact',
  redact: 'redact',
  block: 'block',
};

export type FlagsResult = { ok: true; flags: ServiceFlags } | { ok: false; problems: Problem[] };

/** Parses the header; every malformed entry, unknown key or value, or repeated key is a problem. */
export function parseFlags(header: string): FlagsResult {
  if (header.length > MAX_FLAGS_LENGTH) {
    return {
      ok: false,
      problems: [
        { path: 'flags', message: `header is ${header.length} characters; at most ${MAX_FLAGS_LENGTH}` },
      ],
    };
  }
  const flags: ServiceFlags = {};
  const problems: Problem[] = [];
  const seen = new Set<string>();
  const entries = header.split(',');
  for (let i = 0; i < entries.length; i++) {
    const entry = (entries[i] as string).trim();
    if (entry === '') continue; // tolerate "a=b," and empty headers
    const path = `flags[${i}]`;
    const eq = entry.indexOf('=');
    if (eq <= 0) {
      problems.push({ path, message: `expected key=value, got "${entry}"` });
      continue;
    }
    const key = entry.slice(0, eq).trim();
    const value = entry.slice(eq + 1).trim();
    let slot = key;
    if (key === 'tools') {
      const colon = value.indexOf(':');
      slot = `tools:${colon < 0 ? value : value.slice(0, colon)}`;
    }
    if (seen.has(slot)) {
      problems.push({ path, message: `"${key}" is given more than once` });
      continue;
    }
    seen.add(slot);
    switch (key) {
      case 'mode':
        if ((MODES as readonly string[]).includes(value)) flags.mode = value as Mode;
        else problems.push({ path, message: `mode must be one of ${MODES.join(', ')}; got "${value}"` });
        break;
      case 'pii':
      case 'secrets': {
        const action = Object.hasOwn(CONTENT_WORDS, value) ? CONTENT_WORDS[value] : undefined;
        if (action !== undefined) flags[key] = action;
        else
          problems.push({
            path,
            message: `${key} must be one of off, flag, mask, redact, block; got "${value}"`,
          });
        break;
      }
      case 'tools':
        parseTools(value, path, flags, problems);
        break;
      case 'budget':
        if (BUDGET.test(value)) flags.budget_usd = Number(value);
        else problems.push({ path, message: `budget must be a USD amount like 5.00; got "${value}"` });
        break;
      default:
        problems.push({ path, message: `unknown flag "${key}" (known: mode, pii, secrets, tools, budget)` });
    }
  }
  return problems.length > 0 ? { ok: false, problems } : { ok: true, flags };
}

function parseTools(value: string, path: string, flags: ServiceFlags, problems: Problem[]): void {
  const [kind, ...names] = value.split(':');
  if (kind !== 'allowlist' && kind !== 'denylist') {
    problems.push({
      path,
      message: `tools must be allowlist:<name>[:<name>...] or denylist:...; got "${value}"`,
    });
    return;
  }
  if (names.length === 0 || names.length > MAX_TOOLS || !names.every((n) => TOOL_NAME.test(n))) {
    problems.push({
      path,
      message: `tools=${kind} needs 1 to ${MAX_TOOLS} non-empty tool names (globs allowed)`,
    });
    return;
  }
  if (kind === 'allowlist') flags.tools_allow = names;
  else flags.tools_deny = names;
}

export interface MergeResult {
  flags: EffectiveFlags;
  ignored: { flag: string; reason: string }[];
}

/**
 * Merges flags under the org policy. A flag that is at least as strict as the org setting applies;
 * a looser one is ignored unless the org lists it in `unlocked`. Tool lists always tighten.
 */
export function mergeFlags(policy: CompiledPolicy, flags: ServiceFlags): MergeResult {
  const ignored: { flag: string; reason: string }[] = [];
  const unlocked = policy.unlocked;

  let mode = policy.mode;
  if (flags.mode !== undefined && flags.mode !== mode) {
    if (MODE_ORDER[flags.mode] > MODE_ORDER[mode] || unlocked.has('mode')) mode = flags.mode;
    else ignored.push({ flag: 'mode', reason: looser('mode', flags.mode, policy.mode) });
  }

  const content = (key: 'pii' | 'secrets'): ContentAction => {
    const org = policy.detectors[key].action;
    const want = flags[key];
    if (want === undefined || want === org) return org;
    if (CONTENT_ORDER[want] > CONTENT_ORDER[org] || unlocked.has(key)) return want;
    ignored.push({ flag: key, reason: looser(key, want, org) });
    return org;
  };
  const pii = content('pii');
  const secrets = content('secrets');

  let budget = policy.budget_usd;
  const want = flags.budget_usd;
  if (want !== undefined) {
    if (budget === null || want <= budget || unlocked.has('budget')) budget = want;
    else ignored.push({ flag: 'budget', reason: looser('budget', String(want), String(budget)) });
  }

  return {
    flags: Object.freeze({
      mode,
      pii,
      secrets,
      tools_allow: flags.tools_allow ? compileNameMatcher(flags.tools_allow) : null,
      tools_deny: flags.tools_deny ? compileNameMatcher(withJoinedRuns(flags.tools_deny)) : null,
      budget_usd: budget,
    }),
    ignored,
  };
}

/**
 * A denylist's names, and every run of up to four of them in a row joined with `:` again: names
 * are separated by `:`, so a tool named with one (`mcp:github/create_issue`) can only be written
 * as its parts, and a denylist must still block it (an allowlist is left as written: a name it
 * cannot express is not allowed, so it fails closed).
 */
function withJoinedRuns(names: readonly string[]): string[] {
  const out = [...names];
  for (let i = 0; i < names.length; i++)
    for (let j = i + 2; j <= Math.min(names.length, i + 4); j++) out.push(names.slice(i, j).join(':'));
  return out;
}

function looser(flag: string, want: string, org: string): string {
  return `${flag}=${want} would loosen the org setting (${org}) and the org has not unlocked "${flag}"`;
}

/** The flags evaluate() applies when the request carries none: exactly the policy's settings. */
export function policyFlags(policy: CompiledPolicy): EffectiveFlags {
  return mergeFlags(policy, {}).flags;
}
