import t from 'tap';
import { type RouteLookup, type RouteMatch, Router } from '../../src/http/router.js';

type H = string;

function matched(lookup: RouteLookup<H>): RouteMatch<H> | undefined {
  return lookup !== undefined && 'handler' in lookup ? lookup : undefined;
}

function allowed(lookup: RouteLookup<H>): string[] | undefined {
  return lookup !== undefined && 'allowed' in lookup ? [...lookup.allowed].sort() : undefined;
}

t.test('static routes', async (t) => {
  const r = new Router<H>()
    .add('GET', '/health', 'health')
    .add('GET', '/api/agents', 'list')
    .add('POST', '/api/agents', 'create');
  const m = matched(r.find('GET', '/health'));
  t.equal(m?.handler, 'health');
  t.equal(m?.route, '/health');
  t.same(m?.params, {});
  t.equal(matched(r.find('GET', '/api/agents'))?.handler, 'list');
  t.equal(matched(r.find('POST', '/api/agents'))?.handler, 'create');
  t.equal(r.find('GET', '/nope'), undefined, 'unknown path');
  t.equal(r.find('GET', '/api'), undefined, 'a prefix is not a match');
  t.equal(r.find('GET', '/api/agents/x/y'), undefined, 'longer paths do not match');
  t.equal(r.find('GET', '/HEALTH'), undefined, 'paths are case-sensitive');
});

t.test('param routes', async (t) => {
  const r = new Router<H>()
    .add('GET', '/api/agents/:uuid', 'one')
    .add('DELETE', '/api/agents/:uuid/keys/:key_id', 'revoke')
    .add('GET', '/api/audit/pipeline/:id', 'pipeline');
  const one = matched(r.find('GET', '/api/agents/abc-123'));
  t.equal(one?.handler, 'one');
  t.equal(one?.route, '/api/agents/:uuid', 'route is the pattern, for metrics');
  t.same(one?.params, { uuid: 'abc-123' });
  const two = matched(r.find('DELETE', '/api/agents/u1/keys/k2'));
  t.equal(two?.handler, 'revoke');
  t.same(two?.params, { uuid: 'u1', key_id: 'k2' });
  t.equal(r.find('GET', '/api/agents/'), undefined, 'an empty segment does not fill a param');
  t.equal(r.find('DELETE', '/api/agents/u1/keys/'), undefined);
  t.equal(r.find('GET', '/api/agents/u1/extra'), undefined, 'segment count must match');
  t.equal(r.find('GET', '/api/other/u1'), undefined, 'literal segments must match');
  t.equal(r.find('DELETE', '/api/agents/u1/locks/k2'), undefined);
  t.same(matched(r.find('GET', '/api/audit/pipeline/pl_X'))?.params, { id: 'pl_X' });
});

t.test('a literal beats a param', async (t) => {
  const r = new Router<H>()
    .add('GET', '/api/agents/:uuid', 'by-uuid')
    .add('GET', '/api/agents/onboard', 'static')
    .add('GET', '/v2/:a/:b', 'general')
    .add('GET', '/v2/:a/fixed', 'one-literal')
    .add('GET', '/v2/fixed/fixed', 'all-literal');
  t.equal(matched(r.find('GET', '/api/agents/onboard'))?.handler, 'static', 'static wins though added later');
  t.equal(matched(r.find('GET', '/api/agents/someone'))?.handler, 'by-uuid');
  t.equal(matched(r.find('GET', '/v2/x/fixed'))?.handler, 'one-literal', 'more literal segments win');
  t.same(matched(r.find('GET', '/v2/x/fixed'))?.params, { a: 'x' });
  t.equal(matched(r.find('GET', '/v2/fixed/fixed'))?.handler, 'all-literal');
  t.equal(matched(r.find('GET', '/v2/x/y'))?.handler, 'general');
  t.same(matched(r.find('GET', '/v2/x/y'))?.params, { a: 'x', b: 'y' });

  // Registration order must not matter for patterns of the same length either.
  const r2 = new Router<H>().add('GET', '/p/:x/c', 'param-first').add('GET', '/p/b/c', 'literal-second');
  t.equal(matched(r2.find('GET', '/p/b/c'))?.handler, 'literal-second');
  const r3 = new Router<H>().add('GET', '/q/:x/:y', 'general').add('GET', '/q/b/:y', 'literal');
  t.equal(matched(r3.find('GET', '/q/b/z'))?.handler, 'literal');
  t.equal(matched(r3.find('GET', '/q/c/z'))?.handler, 'general');
});

t.test('405: the path exists for other methods', async (t) => {
  const r = new Router<H>()
    .add('GET', '/x', 'g')
    .add('POST', '/x', 'p')
    .add('GET', '/items/:id', 'get-item')
    .add('DELETE', '/items/:id', 'del-item')
    .add('POST', '/v1/chat/completions', 'chat');
  t.same(allowed(r.find('PUT', '/x')), ['GET', 'POST']);
  t.same(allowed(r.find('PATCH', '/items/7')), ['DELETE', 'GET']);
  t.same(allowed(r.find('GET', '/v1/chat/completions')), ['POST']);
  t.equal(r.find('PUT', '/nothing'), undefined, 'no path, no 405: a 404');
  t.equal(r.find('PUT', '/items/7/8'), undefined);
});

t.test('HEAD is answered by the GET handler', async (t) => {
  const r = new Router<H>()
    .add('GET', '/health', 'health')
    .add('GET', '/items/:id', 'item')
    .add('GET', '/both', 'get-both')
    .add('HEAD', '/both', 'head-both')
    .add('POST', '/post-only', 'p');
  t.equal(matched(r.find('HEAD', '/health'))?.handler, 'health', 'static route');
  const item = matched(r.find('HEAD', '/items/9'));
  t.equal(item?.handler, 'item', 'param route');
  t.same(item?.params, { id: '9' });
  t.equal(matched(r.find('HEAD', '/both'))?.handler, 'head-both', 'an explicit HEAD handler wins');
  t.same(allowed(r.find('HEAD', '/post-only')), ['POST'], 'no GET, no HEAD');
});

t.test('params are percent-decoded', async (t) => {
  const r = new Router<H>().add('GET', '/a/:id', 'a').add('GET', '/a/:id/b/:name', 'ab');
  t.same(matched(r.find('GET', '/a/hello%20world'))?.params, { id: 'hello world' });
  t.same(
    matched(r.find('GET', '/a/x%2Fy'))?.params,
    { id: 'x/y' },
    'an encoded slash stays inside the segment',
  );
  t.same(matched(r.find('GET', '/a/caf%C3%A9'))?.params, { id: 'café' });
  t.same(matched(r.find('GET', '/a/%3Aid'))?.params, { id: ':id' });
  t.same(matched(r.find('GET', '/a/1/b/%E2%9C%93'))?.params, { id: '1', name: '✓' });
  t.same(matched(r.find('GET', '/a/plain'))?.params, { id: 'plain' });
});

t.test('bad percent-encoding is not a match', async (t) => {
  const r = new Router<H>().add('GET', '/a/:id', 'a').add('POST', '/a/:id', 'a-post');
  for (const bad of ['/a/%', '/a/%zz', '/a/%E0%A4%A', '/a/abc%2', '/a/%C3']) {
    t.equal(r.find('GET', bad), undefined, `${bad} is no match`);
    t.equal(r.find('PUT', bad), undefined, `${bad} gives no 405 either`);
  }
});

t.test('registering the same method and route twice throws', async (t) => {
  const r = new Router<H>().add('GET', '/x', 'one').add('GET', '/p/:id', 'pone');
  t.throws(() => r.add('GET', '/x', 'two'), /registered twice/);
  t.throws(() => r.add('GET', '/p/:id', 'ptwo'), /registered twice/);
  t.equal(matched(r.find('GET', '/x'))?.handler, 'one', 'the first registration stays');
  t.equal(matched(r.find('GET', '/p/1'))?.handler, 'pone');
  t.doesNotThrow(() => r.add('POST', '/x', 'post'), 'another method on the same path is fine');
  t.doesNotThrow(() => r.add('POST', '/p/:id', 'ppost'));
});
