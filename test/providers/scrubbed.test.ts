import t from 'tap';
import { scrubbed } from '../../src/providers/upstream.js';

// A provider's error message goes to the agent and into the audit trail: at most 500 characters,
// never cut inside a surrogate pair, and well formed whatever the provider sent.
t.test('a provider message is cut on a character boundary and made well formed', async (t) => {
  const emojiAt499 = `${'a'.repeat(499)}\u{1F600}${'b'.repeat(50)}`;
  const cut = scrubbed(emojiAt499);
  t.equal(cut, 'a'.repeat(499), 'the pair is left out whole, not halved');
  t.ok(cut.isWellFormed());
  const emojiAt498 = `${'a'.repeat(498)}\u{1F600}${'b'.repeat(50)}`;
  t.equal(scrubbed(emojiAt498), `${'a'.repeat(498)}\u{1F600}`, 'a pair that fits is kept');
  t.equal(scrubbed('bad \ud800 name'), 'bad \ufffd name', 'a lone surrogate from the provider');
  t.equal(scrubbed('x'.repeat(600)).length, 500);
});
