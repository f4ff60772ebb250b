import t from 'tap';
import { costOf, estimateCost, priceOf } from '../../../src/core/guardrails/index.js';

t.test('prices by the longest matching prefix', async (t) => {
  t.match(priceOf('gpt-4o-mini-2024-07-18'), { input: 0.15, output: 0.6 });
  t.match(priceOf('gpt-4o-2024-08-06'), { input: 2.5, output: 10 });
  t.equal(priceOf('some-unknown-model'), undefined);
});

t.test('prompt-cache reads and writes are priced at their own share of the input price', async (t) => {
  const sonnet = priceOf('claude-sonnet-4-5') as NonNullable<ReturnType<typeof priceOf>>;
  // 20 plain input tokens, 400 read from the cache, 100 written to it, 30 out.
  const cost = costOf(sonnet, 520, 30, 400, 100);
  t.equal(Math.round(cost * 1e9), Math.round(((20 * 3 + 400 * 0.3 + 100 * 3.75 + 30 * 15) / 1e6) * 1e9));
  t.equal(costOf(sonnet, 520, 30), (520 * 3 + 30 * 15) / 1e6, 'without cache counts: all at the input price');
  const gpt = priceOf('gpt-4.1') as NonNullable<ReturnType<typeof priceOf>>;
  t.equal(costOf(gpt, 1000, 0, 800), (200 * 2 + 800 * 0.5) / 1e6, 'an OpenAI cached read: a quarter');
  t.equal(
    estimateCost('gpt-4o', 4000, 100),
    (1000 * 2.5 + 100 * 10) / 1e6,
    'estimates: four characters a token',
  );
});
