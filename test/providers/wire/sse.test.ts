import fc from 'fast-check';
import t from 'tap';
import { formatSse, type SseEvent, SseParser } from '../../../src/providers/wire/index.js';

function parseAll(...pieces: string[]): SseEvent[] {
  const parser = new SseParser();
  const events = pieces.flatMap((p) => parser.push(p));
  return events;
}

t.test('single and multiple events', async (t) => {
  t.strictSame(parseAll('data: hello\n\n'), [{ data: 'hello' }]);
  t.strictSame(parseAll('data: a\n\ndata: b\n\n'), [{ data: 'a' }, { data: 'b' }]);
  t.strictSame(parseAll('data: incomplete\n'), [], 'no blank line yet: nothing dispatched');
});

t.test('fields: event, id, multi-line data, comments, colon and space rules', async (t) => {
  const text = [
    ': this is a comment',
    'event: message_start',
    'id: 42',
    'data: {"a":',
    'data:1}',
    'retry: 3000',
    'unknown: field',
    '',
    'data',
    '',
    'data:  two spaces',
    'event',
    '',
    'event: only-event',
    '',
    'id: x\0y',
    'data: nul id ignored',
    '',
    'data:',
    'data:',
    '',
    '',
  ].join('\n');
  t.strictSame(parseAll(text), [
    { event: 'message_start', data: '{"a":\n1}', id: '42' },
    { data: '' },
    { data: ' two spaces' },
    { data: 'nul id ignored' },
    { data: '\n' },
  ]);
});

t.test('CRLF, CR and LF line endings, BOM, CRLF split across pushes', async (t) => {
  const expected = [{ data: 'x' }, { event: 'e', data: 'y' }];
  t.strictSame(parseAll('data: x\r\n\r\nevent: e\r\ndata: y\r\n\r\n'), expected);
  t.strictSame(parseAll('data: x\r\revent: e\rdata: y\r\r'), expected);
  t.strictSame(parseAll('\uFEFFdata: x\n\nevent: e\ndata: y\n\n'), expected);
  t.strictSame(parseAll('data: x\r', '\n\r', '\nevent: e\r', '\ndata: y\r\n\r', '\n'), expected);
  t.strictSame(parseAll('data: x\r', '\r', 'event: e\r\n', 'data: y\r', '\r'), expected);
  t.strictSame(parseAll('da', 'ta', ': ', 'x', '\n', '\n'), [{ data: 'x' }]);
  t.strictSame(parseAll('\uFEFF', 'data: x\n\n'), [{ data: 'x' }], 'BOM alone in the first push');
  t.strictSame(parseAll('data: \uFEFFx\n\n'), [{ data: '\uFEFFx' }], 'a BOM inside the stream is data');
});

t.test('a realistic OpenAI stream ending with [DONE]', async (t) => {
  const body =
    'data: {"id":"c1","choices":[{"delta":{"content":"Hi"}}]}\n\n' +
    ': keep-alive\n\n' +
    'data: {"id":"c1","choices":[],"usage":{"total_tokens":3}}\n\n' +
    'data: [DONE]\n\n';
  const events = parseAll(body);
  t.equal(events.length, 3);
  t.strictSame(JSON.parse(events[1]?.data ?? ''), { id: 'c1', choices: [], usage: { total_tokens: 3 } });
  t.equal(events[2]?.data, '[DONE]');
});

t.test('end(): an unterminated last event is returned', async (t) => {
  const parser = new SseParser();
  t.strictSame(parser.push('data: a\n\nevent: last\ndata: b'), [{ data: 'a' }]);
  t.strictSame(parser.end(), [{ event: 'last', data: 'b' }]);
  t.strictSame(parser.end(), [], 'nothing left');
  const noData = new SseParser();
  noData.push('event: x\n');
  t.strictSame(noData.end(), []);
});

t.test('a line or an event longer than the bound is an upstream error, at any chunking', async (t) => {
  const limit = 64;
  const tooLong = (parser: SseParser, pieces: string[]) => {
    try {
      for (const p of pieces) parser.push(p);
      parser.end();
    } catch (err) {
      return err as { code?: string; message: string };
    }
    return undefined;
  };
  const line = tooLong(new SseParser('provider x', limit), ['data: ', 'a'.repeat(40), 'a'.repeat(40)]);
  t.equal(line?.code, 'upstream_error', 'a line that goes on');
  t.match(line?.message, /^provider x sent a stream event longer than/);
  const lines = Array.from({ length: 10 }, () => `data: ${'b'.repeat(10)}\n`);
  t.equal(tooLong(new SseParser('provider x', limit), lines)?.code, 'upstream_error', 'data lines adding up');
  const atLimit = new SseParser('provider x', limit);
  t.strictSame(atLimit.push(`data: ${'c'.repeat(limit - 6)}\n\n`), [{ data: 'c'.repeat(limit - 6) }]);
  t.strictSame(
    atLimit.push(`data: ${'d'.repeat(30)}\ndata: ${'d'.repeat(30)}\n\n`),
    [{ data: `${'d'.repeat(30)}\n${'d'.repeat(30)}` }],
    'an event at the bound passes',
  );
  const comments = Array.from({ length: 100 }, () => `: ${'e'.repeat(50)}\n`);
  t.equal(tooLong(new SseParser('provider x', limit), comments), undefined, 'comment lines do not add up');
});

t.test('formatSse', async (t) => {
  t.equal(formatSse('{"a":1}'), 'data: {"a":1}\n\n');
  t.equal(formatSse('{"a":1}', 'message_start'), 'event: message_start\ndata: {"a":1}\n\n');
  t.equal(formatSse('x', undefined, '7'), 'id: 7\ndata: x\n\n');
  t.equal(formatSse('one\ntwo\r\nthree\rfour'), 'data: one\ndata: two\ndata: three\ndata: four\n\n');
  t.equal(formatSse(''), 'data: \n\n');
  t.equal(formatSse('a\n'), 'data: a\ndata: \n\n');
  t.throws(() => formatSse('x', 'bad\nevent'), TypeError);
  t.throws(() => formatSse('x', undefined, 'bad\rid'), TypeError);
  t.strictSame(parseAll(formatSse('one\ntwo\r\nthree', 'e')), [{ event: 'e', data: 'one\ntwo\nthree' }]);
});

// ---------- property: any chunking yields the same events ----------

interface Generated {
  event?: string;
  id?: string;
  data: string;
  comment: boolean;
}

const lineBreak = fc.constantFrom('\n', '\r', '\r\n');
const dataText = fc
  .array(fc.oneof(fc.string({ unit: 'binary', maxLength: 12 }), lineBreak), { maxLength: 5 })
  .map((parts) => parts.join(''));
const generatedEvent: fc.Arbitrary<Generated> = fc.record(
  {
    event: fc.stringMatching(/^[a-z_.]{1,12}$/),
    id: fc.stringMatching(/^[A-Za-z0-9_-]{0,8}$/),
    data: dataText,
    comment: fc.boolean(),
  },
  { requiredKeys: ['data', 'comment'] },
);

/** Serialises with a random line ending per line and optional space after `data:`. */
function serialise(events: Generated[], endings: string[], spaces: boolean[], bom: boolean): string {
  let out = bom ? '\uFEFF' : '';
  let n = 0;
  let previous = '\n';
  const line = (text: string) => {
    let ending = endings[n % endings.length] ?? '\n';
    // A CR followed by an empty line ended by LF would read as one CRLF: avoid building that.
    if (previous === '\r' && text === '' && ending === '\n') ending = '\r\n';
    out += text + ending;
    previous = ending;
    n++;
  };
  for (const e of events) {
    if (e.comment) line(': comment');
    if (e.event !== undefined) line(`event: ${e.event}`);
    if (e.id !== undefined) line(`id: ${e.id}`);
    for (const value of e.data.split(/\r\n|\r|\n/)) {
      const space = (spaces[n % spaces.length] ?? true) || value.startsWith(' ');
      line(space ? `data: ${value}` : `data:${value}`);
    }
    line('');
  }
  return out;
}

function expected(events: Generated[]): SseEvent[] {
  return events.map((e) => {
    const out: SseEvent = { data: e.data.replace(/\r\n|\r/g, '\n') };
    if (e.event !== undefined) out.event = e.event;
    if (e.id !== undefined) out.id = e.id;
    return out;
  });
}

const streamArb = fc.record({
  events: fc.array(generatedEvent, { minLength: 1, maxLength: 5 }),
  endings: fc.array(lineBreak, { minLength: 1, maxLength: 7 }),
  spaces: fc.array(fc.boolean(), { minLength: 1, maxLength: 5 }),
  bom: fc.boolean(),
});

t.test('property: split at every character boundary gives the same events', async (t) => {
  fc.assert(
    fc.property(streamArb, ({ events, endings, spaces, bom }) => {
      const text = serialise(events, endings, spaces, bom);
      const want = expected(events);
      t.strictSame(parseAll(text), want);
      for (let i = 0; i <= text.length; i++) {
        const got = parseAll(text.slice(0, i), text.slice(i));
        if (JSON.stringify(got) !== JSON.stringify(want)) {
          throw new Error(`split at ${i} of ${JSON.stringify(text)}: ${JSON.stringify(got)}`);
        }
      }
    }),
    { numRuns: 150 },
  );
});

t.test(
  'property: bytes split at every boundary and decoded in stream mode give the same events',
  async (t) => {
    const encoder = new TextEncoder();
    fc.assert(
      fc.property(streamArb, ({ events, endings, spaces, bom }) => {
        const bytes = encoder.encode(serialise(events, endings, spaces, bom));
        const want = JSON.stringify(expected(events));
        for (let i = 0; i <= bytes.length; i++) {
          const decoder = new TextDecoder('utf-8');
          const parser = new SseParser();
          const got = [
            ...parser.push(decoder.decode(bytes.subarray(0, i), { stream: true })),
            ...parser.push(decoder.decode(bytes.subarray(i), { stream: true })),
            ...parser.push(decoder.decode()),
          ];
          if (JSON.stringify(got) !== want) throw new Error(`byte split at ${i}`);
        }
      }),
      { numRuns: 100 },
    );
    t.pass('all byte splits agree');
  },
);

t.test('property: random multi-way chunking gives the same events', async (t) => {
  fc.assert(
    fc.property(
      streamArb,
      fc.array(fc.nat(), { maxLength: 20 }),
      ({ events, endings, spaces, bom }, cuts) => {
        const text = serialise(events, endings, spaces, bom);
        const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
        const pieces: string[] = [];
        let prev = 0;
        for (const p of [...points, text.length]) {
          pieces.push(text.slice(prev, p));
          prev = p;
        }
        return JSON.stringify(parseAll(...pieces)) === JSON.stringify(expected(events));
      },
    ),
    { numRuns: 300 },
  );
  t.pass('all chunkings agree');
});
