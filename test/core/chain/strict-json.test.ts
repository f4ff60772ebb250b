import t from 'tap';
import { duplicateMember } from '../../../src/core/chain/strict-json.js';

t.test('duplicateMember finds a name an object repeats, at any depth, decoded', async (t) => {
  t.equal(duplicateMember('{"a":1,"b":2}'), undefined);
  t.equal(duplicateMember('{"outcome":"block","id":"x","outcome":"allow"}'), 'outcome');
  t.equal(duplicateMember('{"a":{"x":1,"x":2}}'), 'x', 'nested');
  t.equal(duplicateMember('{"a":"x","\\u0061":"y"}'), 'a', 'an escaped spelling of the same name');
  t.equal(duplicateMember('[{"a":1},{"a":2}]'), undefined, 'one name in two objects');
  t.equal(duplicateMember('{"a":[{"b":1}],"b":2}'), undefined, 'a name inside and outside');
  t.equal(duplicateMember('{"s":"a \\"quoted\\", \\"s\\":2","t":1}'), undefined, 'names inside strings');
  t.equal(duplicateMember('{"a": [1, "a", {"a": 1}], "c": {"d": 1, "e": [2, {"d": 3}]}}'), undefined);
  t.equal(duplicateMember('{ "a" : 1 ,\n "a" : 2 }'), 'a', 'whitespace');
});
