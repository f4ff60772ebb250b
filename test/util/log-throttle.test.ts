import t from 'tap';
import { LogThrottle } from '../../src/util/log-throttle.js';

t.test('one line per key per interval, the next one saying how many were not written', async (t) => {
  let now = 1_000;
  const throttle = new LogThrottle(10_000, () => now);
  t.equal(throttle.take('a'), 0, 'the first line of a key is written');
  for (let i = 0; i < 5; i++) t.equal(throttle.take('a'), undefined, 'the next ones within 10 s are not');
  t.equal(throttle.take('b'), 0, 'another key has its own interval');
  now += 9_999;
  t.equal(throttle.take('a'), undefined);
  now += 1;
  t.equal(throttle.take('a'), 6, '10 s on: written, with the 6 not written since the last');
  t.equal(throttle.take('a'), undefined);
  now += 60_000;
  t.equal(throttle.take('a'), 1);
  t.equal(throttle.take('b'), 0, 'nothing was held back of b');
});
