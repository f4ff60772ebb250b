import t from 'tap';
import { keyScrub, scrubbed, withoutProviderKey } from '../../src/providers/upstream.js';

// A provider's error message goes to the agent and into the audit trail: at most 500 characters,
// never cut inside a surrogate pair, and well formed whatever the provider sent.
t.test('a provider message is cut on a character boundary and made well formed', async (t) => {
  const emojiAt499 = `${'a'.repeat(499)}\u{1F600}${'b'.repeat(50)}`;
  const cut = scrubbed(emojiAt499, undefined);
  t.equal(cut, 'a'.repeat(499), 'the pair is left out whole, not halved');
  t.ok(cut.isWellFormed());
  const emojiAt498 = `${'a'.repeat(498)}\u{1F600}${'b'.repeat(50)}`;
  t.equal(scrubbed(emojiAt498, undefined), `${'a'.repeat(498)}\u{1F600}`, 'a pair that fits is kept');
  t.equal(scrubbed('bad \ud800 name', undefined), 'bad \ufffd name', 'a lone surrogate from the provider');
  t.equal(scrubbed('x'.repeat(600), undefined).length, 500);
});

// The org's own provider key is taken out by value, whatever its format (the secrets detector
// knows only some), before the message is cut, so a cut cannot leave its first characters.
t.test("the provider's key is replaced by value, before the cut", async (t) => {
  const key = '0123456789abcdef0123456789abcdef';
  t.equal(scrubbed(`bad key ${key}.`, key), 'bad key [PROVIDER_KEY].');
  t.equal(scrubbed(`bad key ${key}.`, undefined), `bad key ${key}.`, 'the detector alone misses it');
  t.equal(scrubbed(`KEY=${key.toUpperCase()}`, key), 'KEY=[PROVIDER_KEY]', 'in any letter case');
  const at495 = `${'a'.repeat(495)}${key} and more`;
  t.equal(scrubbed(at495, key), `${'a'.repeat(495)}[PROV`, 'a key across the cut is not half kept');
  t.equal(
    withoutProviderKey(`sent Bearer ${key} and ${key}`, ` Bearer ${key} `),
    'sent [PROVIDER_KEY] and [PROVIDER_KEY]',
    'a key configured with its scheme: with and without it',
  );
  t.equal(
    withoutProviderKey('a.b*c+d? a-b*c+d? (x)', 'a.b*c+d?'),
    '[PROVIDER_KEY] a-b*c+d? (x)',
    'a literal match',
  );
  t.equal(withoutProviderKey('text', ''), 'text', 'an empty key replaces nothing');
  t.equal(withoutProviderKey('text', '  '), 'text');
});

t.test('a placeholder key shorter than 8 characters is not replaced: it is no secret', async (t) => {
  t.equal(
    scrubbed('Input is empty: the prompt must not be EMPTY', 'EMPTY'),
    'Input is empty: the prompt must not be EMPTY',
  );
  t.equal(
    scrubbed('max_tokens exceeds context of 4096; next time', 'x'),
    'max_tokens exceeds context of 4096; next time',
  );
  t.equal(
    scrubbed('bad key 0123456789abcdef', '0123456789abcdef'),
    'bad key [PROVIDER_KEY]',
    'a real one is',
  );
});

t.test('keyScrub finds the key in any letter case and with or without its scheme', (t) => {
  const key = 'sk-Ab12.Cd34+Ef56/Gh78';
  const scrub = keyScrub(`Bearer ${key}`);
  if (scrub === undefined) {
    t.fail('a key of 8 characters or more is a secret');
    return t.end();
  }
  const clean = 'an answer that holds no key, only sk-Ab12 and Cd34';
  t.equal(scrub.scrub(clean), clean, 'a text without it is returned as it is');
  t.equal(
    scrub.scrub(`a ${key} b ${key.toUpperCase()} c Bearer ${key} d ${key.toLowerCase()}`),
    'a [PROVIDER_KEY] b [PROVIDER_KEY] c [PROVIDER_KEY] d [PROVIDER_KEY]',
  );
  t.equal(scrub.scrub(key.slice(0, -1)), key.slice(0, -1), 'a part of the key is not the key');
  t.equal(keyScrub('EMPTY'), undefined, 'a placeholder key is no secret');
  t.equal(keyScrub('   '), undefined);
  t.equal(keyScrub(undefined), undefined);
  t.end();
});
