import t from 'tap';
import { embeddingResponse } from '../../../src/providers/wire/index.js';

const valid = () => ({
  object: 'list',
  data: [
    { object: 'embedding', index: 0, embedding: [0.1, -2, 3e-5] },
    { object: 'embedding', index: 1, embedding: [0, 0, 0] },
  ],
  model: 'text-embedding-3-small',
  usage: { prompt_tokens: 4, total_tokens: 4 },
});

t.test('a valid answer is rebuilt from its documented fields only', async (t) => {
  t.strictSame(embeddingResponse(valid(), false), valid());
  const extra = valid() as Record<string, any>;
  extra.cluster_secret = 'k8s-etcd-root-pw';
  extra.data[0].note = 'internal';
  extra.usage.completion_tokens = 0;
  t.strictSame(embeddingResponse(extra, false), valid(), 'unknown members are dropped, at every level');
  const b64 = { ...valid(), data: [{ object: 'embedding', index: 0, embedding: 'zczMPc3MTD6amZk+' }] };
  t.strictSame(embeddingResponse(b64, true), b64, 'base64 text when encoding_format is base64');
  t.strictSame(embeddingResponse({ ...valid(), data: [] }, false), { ...valid(), data: [] }, 'no inputs');
});

t.test('numbers where base64 was asked for are encoded as OpenAI encodes them', async (t) => {
  // An OpenAI-compatible server that ignores encoding_format; the official SDK asks for base64.
  const answer = embeddingResponse(valid(), true);
  if (typeof answer === 'string') throw new Error(answer);
  const decoded = answer.data.map((d) => {
    const bytes = Buffer.from(d.embedding as string, 'base64');
    return [...new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4)];
  });
  t.same(
    decoded,
    [
      [Math.fround(0.1), -2, Math.fround(3e-5)],
      [0, 0, 0],
    ],
    'float32, little-endian',
  );
  t.equal(
    answer.data[0]?.embedding,
    'zczMPQAAAMCCqPs3',
    'the bytes OpenAI would send (struct.pack("<3f") in Python)',
  );
});

t.test('an answer that is not one says which field, never a value', async (t) => {
  const cases: [string, unknown, boolean, string][] = [
    ['an arbitrary object', { secret: 'x' }, false, 'object is not "list"'],
    ['an array', [valid()], false, 'the answer is not a JSON object'],
    ['null', null, false, 'the answer is not a JSON object'],
    ['data not an array', { ...valid(), data: { 0: 'secret' } }, false, 'data is not an array'],
    ['no model', { ...valid(), model: undefined }, false, 'model is not a string'],
    ['no usage', { ...valid(), usage: undefined }, false, 'usage is not an object'],
    [
      'text counts',
      { ...valid(), usage: { prompt_tokens: 'secret', total_tokens: 1 } },
      false,
      'usage.prompt_tokens',
    ],
    [
      'negative count',
      { ...valid(), usage: { prompt_tokens: 1, total_tokens: -1 } },
      false,
      'usage.total_tokens',
    ],
    ['a text item', { ...valid(), data: ['secret'] }, false, 'data[0] is not an object'],
    [
      'another object',
      { ...valid(), data: [{ object: 'secret', index: 0, embedding: [] }] },
      false,
      'data[0].object',
    ],
    ['no index', { ...valid(), data: [{ object: 'embedding', embedding: [1] }] }, false, 'data[0].index'],
    [
      'a fractional index',
      { ...valid(), data: [{ object: 'embedding', index: 0.5, embedding: [1] }] },
      false,
      'data[0].index',
    ],
    [
      'text for floats',
      { ...valid(), data: [{ object: 'embedding', index: 0, embedding: 'secret' }] },
      false,
      'data[0].embedding is not an array of numbers',
    ],
    [
      'text in the floats',
      { ...valid(), data: [{ object: 'embedding', index: 0, embedding: [1, 'secret'] }] },
      false,
      'data[0].embedding',
    ],
    [
      'not base64',
      { ...valid(), data: [{ object: 'embedding', index: 0, embedding: 'a secret!' }] },
      true,
      'data[0].embedding is neither base64 text nor an array of numbers',
    ],
  ];
  for (const [what, value, base64, why] of cases) {
    const answer = embeddingResponse(value, base64);
    t.type(answer, 'string', `${what}: refused`);
    t.match(answer, why, `${what}: ${answer}`);
    t.notMatch(answer, /secret/, `${what}: no value echoed`);
  }
});
