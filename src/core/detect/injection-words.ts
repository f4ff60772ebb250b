// The words the injection patterns are written with, read off their regex sources: leet.ts folds a
// word written with digits (`1nstruct1ons`) only when it reads as one of them, so no other word of a
// text is touched. A source is parsed into its language of letters and breaks (anything that is not
// a letter: `\s`, punctuation, `\w`, `\d`, …; `\b` and lookaheads match nothing), and every run of
// letters it can produce between two breaks is a word: `instructions?` gives `instruction` and
// `instructions`, `summari[sz]e` both spellings, `polic(?:y|ies)` `policy` and `policies`. Only the
// syntax the patterns use is read (groups, alternation, classes, escapes, quantifiers); anything else
// is a start-up error.

/** Letters before the first break and after the last one; `tail` null: no break at all. */
interface Item {
  head: string;
  tail: string | null;
}

type Lang = Map<string, Item>;

const EMPTY: Lang = lang([{ head: '', tail: null }]);
const BREAK: Lang = lang([{ head: '', tail: '' }]);

function lang(items: Item[]): Lang {
  const m: Lang = new Map();
  for (const it of items) m.set(`${it.head}|${it.tail ?? ''}|${it.tail === null}`, it);
  return m;
}

function union(a: Lang, b: Lang): Lang {
  return lang([...a.values(), ...b.values()]);
}

/** Every string of `a` followed by every string of `b`; words closed between them go to `out`. */
function concat(a: Lang, b: Lang, out: Set<string>): Lang {
  const items: Item[] = [];
  for (const x of a.values()) {
    for (const y of b.values()) {
      if (x.tail === null) items.push({ head: x.head + y.head, tail: y.tail });
      else if (y.tail === null) items.push({ head: x.head, tail: x.tail + y.head });
      else {
        out.add(x.tail + y.head);
        items.push({ head: x.head, tail: y.tail });
      }
    }
  }
  return lang(items);
}

class Parser {
  i = 0;
  constructor(
    readonly src: string,
    readonly out: Set<string>,
  ) {}

  fail(what: string): never {
    throw new Error(`injection pattern words: ${what} at ${this.i} of ${JSON.stringify(this.src)}`);
  }

  alternation(): Lang {
    let l = this.sequence();
    while (this.src[this.i] === '|') {
      this.i++;
      l = union(l, this.sequence());
    }
    return l;
  }

  sequence(): Lang {
    let l = EMPTY;
    while (this.i < this.src.length && this.src[this.i] !== '|' && this.src[this.i] !== ')') {
      l = concat(l, this.quantified(), this.out);
    }
    return l;
  }

  quantified(): Lang {
    const atom = this.atom();
    const q = this.src[this.i];
    let min = 1;
    let max = 1;
    if (q === '?' || q === '*' || q === '+') {
      this.i++;
      min = q === '+' ? 1 : 0;
      max = q === '?' ? 1 : 2;
    } else if (q === '{') {
      const m = /^\{(\d+)(?:,(\d*))?\}/.exec(this.src.slice(this.i));
      if (m === null) this.fail('a counted repeat');
      this.i += m[0].length;
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[2] === '' ? 2 : Math.min(2, Number(m[2]));
    } else {
      return atom;
    }
    if (this.src[this.i] === '?') this.i++; // lazy
    // Two copies in a row show every word a repeat can join across copies.
    let l = min === 0 ? EMPTY : atom;
    if (min === 0 && max >= 1) l = union(l, atom);
    if (max >= 2) l = union(l, concat(atom, atom, this.out));
    return l;
  }

  atom(): Lang {
    const c = this.src[this.i]!;
    if (c === '(') {
      this.i++;
      let lookahead = false;
      if (this.src.startsWith('?:', this.i)) this.i += 2;
      else if (this.src.startsWith('?=', this.i) || this.src.startsWith('?!', this.i)) {
        this.i += 2;
        lookahead = true;
      } else if (this.src[this.i] === '?') this.fail('a group kind');
      const inner = this.alternation();
      if (this.src[this.i] !== ')') this.fail('an unclosed group');
      this.i++;
      return lookahead ? EMPTY : inner;
    }
    if (c === '[') return this.charClass();
    if (c === '\\') {
      const e = this.src[this.i + 1];
      this.i += 2;
      if (e === 'b') return EMPTY;
      if (e !== undefined && /[sSwWdD.|\][()/\\*+?{}^$-]/.test(e)) return BREAK;
      return this.fail(`escape \\${e}`);
    }
    this.i++;
    if (c === '^' || c === '$') return EMPTY;
    if (/[a-zA-Z]/.test(c)) return lang([{ head: c.toLowerCase(), tail: null }]);
    if (c === '*' || c === '+' || c === '?' || c === '{') this.fail('a quantifier without an atom');
    return BREAK;
  }

  charClass(): Lang {
    const end = this.src.indexOf(']', this.i + 1);
    if (end === -1) this.fail('an unclosed class');
    const body = this.src.slice(this.i + 1, end);
    this.i = end + 1;
    if (body.startsWith('^') || /[a-zA-Z]-/.test(body)) this.fail('a negated class or a letter range');
    const letters = [...body.replace(/\\./g, '')].filter((ch) => /[a-zA-Z]/.test(ch));
    const other = body.replace(/[a-zA-Z]/g, '').length > 0;
    let l: Lang = lang(letters.map((ch) => ({ head: ch.toLowerCase(), tail: null })));
    if (other || letters.length === 0) l = union(l, BREAK);
    return l;
  }
}

/** Adds to `out` every word (lower case) a match of the regex `source` can contain. */
export function addPatternWords(source: string, out: Set<string>): void {
  const p = new Parser(source, out);
  const l = p.alternation();
  if (p.i !== source.length) p.fail('an unmatched )');
  for (const it of l.values()) {
    out.add(it.head);
    if (it.tail !== null) out.add(it.tail);
  }
  out.delete('');
}
