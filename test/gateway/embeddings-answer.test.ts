import OpenAI from 'openai';
import t from 'tap';
import { serviceOnMockUpstream } from '../helpers/service.js';

// `/v1/embeddings` hands on what the provider answered, but only as an embeddings answer: rebuilt
// from the documented fields, and a 502 for anything else (egress review #2: a provider whose
// base_url reached an internal service returned that service's JSON to the agent verbatim).

const extraMembers = {
  object: 'list',
  data: [{ object: 'embedding', index: 0, embedding: [0.5, 0.25], note: 'internal' }],
  model: 'text-embedding-test',
  usage: { prompt_tokens: 2, total_tokens: 2, debug_tokens: 9 },
  cluster_secret: 'k8s-etcd-root-pw',
  tenants: ['org_a', 'org_b'],
};

t.test('an embeddings answer is rebuilt from its documented fields; anything else is 502', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });

  // (a) A valid answer reaches the client unchanged, in either encoding.
  const floats = await client.embeddings.create({
    model: 'text-embedding-test',
    input: ['a', 'b'],
    encoding_format: 'float',
  });
  t.same(
    floats.data.map((d) => d.embedding),
    [
      [0.1, 0.2, 0.3],
      [0.1, 0.2, 0.3],
    ],
  );
  t.same(floats.usage, { prompt_tokens: 3, total_tokens: 3 });
  t.equal(floats.model, 'text-embedding-test');
  t.equal((floats as unknown as { service: { blocked: boolean } }).service.blocked, false, 'the envelope');
  // The client's default: base64, which it decodes.
  const decoded = await client.embeddings.create({ model: 'text-embedding-test', input: 'a' });
  t.equal((upstream.requests.at(-1)?.body as { encoding_format?: string }).encoding_format, 'base64');
  t.same(decoded.data[0]?.embedding, [Math.fround(0.1), Math.fround(0.2), Math.fround(0.3)]);

  // (b) Any other JSON object is a 502 that does not repeat it.
  upstream.behaviour = { kind: 'raw', contentType: 'application/json', body: '{"secret":"x"}' };
  const err = await client.embeddings
    .create({ model: 'text-embedding-test', input: 'a', encoding_format: 'float' })
    .catch((e: unknown) => e);
  t.ok(err instanceof OpenAI.APIError, String(err));
  const apiError = err as InstanceType<typeof OpenAI.APIError>;
  t.equal(apiError.status, 502);
  t.equal(apiError.code, 'upstream_error');
  t.match(apiError.message, /provider openai sent an unexpected embeddings answer: object is not "list"/);
  t.notMatch(apiError.message, /secret/);
  t.notMatch(JSON.stringify(apiError.error), /secret/);

  // (c) Members the format does not document are dropped, at every level.
  upstream.behaviour = { kind: 'raw', contentType: 'application/json', body: JSON.stringify(extraMembers) };
  const res = await svc.call('/v1/embeddings', {
    token: svc.agentKey,
    body: { model: 'text-embedding-test', input: 'a' },
  });
  t.equal(res.status, 200);
  t.same(Object.keys(res.body), ['object', 'data', 'model', 'usage', 'service']);
  t.same(res.body.data, [{ object: 'embedding', index: 0, embedding: [0.5, 0.25] }]);
  t.same(res.body.usage, { prompt_tokens: 2, total_tokens: 2 });
  t.notMatch(JSON.stringify(res.body), /k8s|org_a|internal|debug_tokens/);
  const viaClient = await client.embeddings.create({
    model: 'text-embedding-test',
    input: 'a',
    encoding_format: 'float',
  });
  t.notOk('cluster_secret' in viaClient, 'nor does the client see them');
  t.same(viaClient.data[0]?.embedding, [0.5, 0.25]);
});
