/** Compiles a `*` glob (the only wildcard) into an anchored matcher. */
export function globMatcher(glob: string): (value: string) => boolean {
  if (!glob.includes('*')) return (v) => v === glob;
  const re = new RegExp(`^${glob.split('*').map(escapeRegex).join('.*')}$`);
  return (v) => re.test(v);
}

export function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
