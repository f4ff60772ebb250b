/**
 * The first object member name a JSON text repeats within one object, or undefined. JSON.parse
 * keeps the last of duplicate members, while another reader may take the first: a file that
 * repeats a member can say one thing to govgate's checks and another to its reader (an injected
 * `"outcome":"block",` ahead of the real member). The text is assumed to parse (check that
 * first); the scan is linear, and keeps one set of names per open object.
 */
export function duplicateMember(text: string): string | undefined {
  const stack: Array<Set<string> | null> = []; // null: an array
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: to its closing quote, an escaped character skipped whole.
      const start = i + 1;
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
      const names = stack[stack.length - 1];
      if (expectKey && names) {
        // Compared as decoded: `"a"` and `"\u0061"` are one name.
        const name = JSON.parse(text.slice(start - 1, i + 1)) as string;
        if (names.has(name)) return name;
        names.add(name);
        expectKey = false;
      }
    } else if (c === 0x7b) {
      stack.push(new Set());
      expectKey = true;
    } else if (c === 0x5b) {
      stack.push(null);
      expectKey = false;
    } else if (c === 0x7d || c === 0x5d) {
      stack.pop();
      expectKey = false;
    } else if (c === 0x2c) {
      expectKey = stack[stack.length - 1] !== null && stack.length > 0;
    }
  }
  return undefined;
}
