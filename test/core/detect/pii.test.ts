import t from 'tap';
import { detect } from '../../../src/core/detect/index.js';
import { validIpv6 } from '../../../src/core/detect/pii-ipv6.js';
import { checkCorpus } from './corpus.js';

function pii(text: string, types?: readonly string[]): [string, string][] {
  return detect(text, { pii: types ?? true, secrets: false, injection: false, unicode: false }).findings.map(
    (f) => [f.type, text.slice(f.start, f.end)],
  );
}

t.test('corpus: precision and recall', async (t) => {
  const cases = checkCorpus(t, 'pii.json', 'pii', 'pii');
  for (const c of cases.filter((c) => c.expect.length === 0)) {
    t.same(pii(c.text), [], `no PII in negative: ${c.text.slice(0, 50)}`);
  }
});

t.test('offsets are UTF-16 indexes into the original text', async (t) => {
  const text = '😀🎉 naïve café — mail lee@example.org, ☎ 212-555-0187';
  const r = detect(text);
  const email = r.findings.find((f) => f.type === 'email');
  const phone = r.findings.find((f) => f.type === 'phone');
  t.ok(email && phone);
  t.equal(email?.start, text.indexOf('lee@'));
  t.equal(email?.end, text.indexOf('lee@') + 'lee@example.org'.length);
  t.equal(text.slice(phone?.start, phone?.end), '212-555-0187');
  t.equal(phone?.end, text.length);
});

t.test('pii option restricts types', async (t) => {
  const text = 'a.b@example.com 4111111111111111 212-555-0187';
  t.same(
    pii(text, ['card']).map(([type]) => type),
    ['card'],
  );
  t.same(
    pii(text, ['email', 'phone']).map(([type]) => type),
    ['email', 'phone'],
  );
  t.same(pii(text, ['nonsense', 'toString']), [], 'unknown names select nothing');
  t.same(detect(text, { pii: false }).findings, []);
});

t.test('cards: layouts, Luhn and issuer', async (t) => {
  t.same(pii('4111-1111-1111-1111'), [['card', '4111-1111-1111-1111']]);
  t.same(pii('4111 1111 1111 1111 and more'), [['card', '4111 1111 1111 1111']]);
  t.same(pii('4111 1111-1111 1111'), [], 'mixed separators');
  t.same(pii('41111 11111 11111 1'), [], 'odd grouping');
  t.same(pii('4111111111111111234'), [], '19 digits failing Luhn');
  t.same(pii('x4111111111111111'), [], 'glued to a word');
  t.same(pii('4111-1111-1111-1111-2'), [], 'longer dashed number');
  // A card is found after the marks a label or a path puts before it: its issuer prefix and
  // Luhn digit, not the character before it, tell it from other numbers.
  t.same(pii('card #4111111111111111 declined'), [['card', '4111111111111111']], 'after #');
  t.same(pii('card_4111111111111111'), [['card', '4111111111111111']], 'after _');
  t.same(pii('GET /cards/4111111111111111/charges'), [['card', '4111111111111111']], 'in a path');
  t.same(pii('pan=5500005555555559_exp'), [['card', '5500005555555559']], 'before _');
  t.same(pii('#4111111111111112'), [], 'after # but failing Luhn');
  t.same(pii('issue #212-555-0187'), [], 'after # a phone shape stays a reference');
});

t.test('IBANs: any letter case, checked by length and mod-97', async (t) => {
  t.same(pii('DE89 3704 0044 0532 0130 00'), [['iban', 'DE89 3704 0044 0532 0130 00']]);
  t.same(pii('iban: de89 3704 0044 0532 0130 00.'), [['iban', 'de89 3704 0044 0532 0130 00']]);
  t.same(pii('gb82west12345698765432'), [['iban', 'gb82west12345698765432']]);
  t.same(pii('gb83west12345698765432'), [], 'wrong check digits');
  t.same(pii('xde89370400440532013000'), [], 'glued to a word');
});

t.test('phones: formats and look-alikes', async (t) => {
  t.same(pii('+1 (650) 555-0199'), [['phone', '+1 (650) 555-0199']]);
  t.same(pii('call +4915123456789 now'), [['phone', '+4915123456789']]);
  t.same(pii('555-123-4567'), [['phone', '555-123-4567']]);
  t.same(pii('555-123.4567'), [], 'inconsistent separators');
  t.same(pii('123-456-7890'), [], 'area code cannot start with 1');
  t.same(pii('Order 555-123-4567'), [], 'order id context');
  t.same(pii('2024-03-15 and 15.03.2024 and 03/15/2024'), [], 'dates');
  t.same(pii('v1.555.123.4567'), [], 'inside a version');
  t.same(pii('+1000 points'), [], 'too few digits after +');
  t.same(pii('+12 345 678 901 234 567 890'), [['phone', '+12 345 678 901 234']], 'at most 15 digits');
  t.same(
    pii('+33 1 23 45 67 89 4111 1111 1111 1111'),
    [
      ['phone', '+33 1 23 45 67 89'],
      ['card', '4111 1111 1111 1111'],
    ],
    'a phone stops before a card',
  );
});

t.test('IPv4 and IPv6', async (t) => {
  t.same(pii('from 192.168.10.20.'), [['ipv4', '192.168.10.20']], 'trailing full stop is not part of it');
  t.same(pii('256.1.1.1 and 1.2.3.4.5 and 01.02.03.04'), []);
  t.same(pii('127.0.0.1 0.0.0.0 255.255.255.0 10.0.0.0/8'), [], 'loopback, unspecified, netmask, CIDR');
  t.same(pii('version 4.0.0.1'), [], 'version context');
  t.same(pii('peer [2001:db8::1]:443'), [['ipv6', '2001:db8::1']]);
  t.same(pii('::ffff:192.0.2.128 mapped'), [['ipv6', '::ffff:192.0.2.128']]);
  t.ok(validIpv6('2001:db8:0:0:0:0:2:1'));
  t.ok(validIpv6('fe80::1'));
  t.notOk(validIpv6('::1'), 'loopback has one group');
  t.notOk(validIpv6('dead::beef'), 'no decimal digit');
  t.notOk(validIpv6('1:2:3:4:5:6:7'), 'seven groups without ::');
  t.notOk(validIpv6('1::2::3'), 'two ::');
  t.notOk(validIpv6('12345::1'), 'group too long');
});

t.test('emails', async (t) => {
  t.same(pii('Mail "Ann" <ann.lee@mail.example.com>.'), [['email', 'ann.lee@mail.example.com']]);
  t.same(pii('postgres://app:pw@db.example.com/x'), [], 'URL credentials are not an address');
  t.same(pii('a..b@example.com'), [['email', 'b@example.com']], 'local part starts after the double dot');
  t.same(pii('x@example.c0m y@-bad.com z@example.'), []);
});

t.test('SSN and DOB need their shape or context', async (t) => {
  t.same(pii('SSN: 123456789'), [['ssn', '123456789']]);
  t.same(pii('ticket 123456789'), [], 'nine digits without context');
  t.same(pii('part 123-45-6789-1'), [], 'longer dashed number');
  t.same(pii('Date of birth: 5th of May, 1980'), [['dob', '5th of May, 1980']]);
  t.same(pii('D.O.B. 31.12.1969'), [['dob', '31.12.1969']]);
  t.same(pii('DOB 13/13/1990'), [], 'no month in 13/13');
  t.same(pii('Released on 2024-05-01'), [], 'a date without birth context');
});

t.test('PII hidden with zero-width characters is still found, offsets span them', async (t) => {
  const text = 'write to jo\u200bhn@exa\u200dmple.com today';
  const r = detect(text);
  const email = r.findings.find((f) => f.type === 'email');
  t.equal(text.slice(email?.start, email?.end), 'jo\u200bhn@exa\u200dmple.com');
  t.same(
    r.findings.filter((f) => f.category === 'unicode').map((f) => f.type),
    ['invisible', 'invisible'],
  );
});

t.test('labels: "Phone no:" and "Email:" name the value, "Order no." does not', async (t) => {
  const found = (text: string): string[] =>
    detect(text).findings.map((f) => `${f.type}:${text.slice(f.start, f.end)}`);
  t.same(found('Phone no: +44 7911 123456'), ['phone:+44 7911 123456']);
  t.same(found('Mobile No. 415-555-0132'), ['phone:415-555-0132']);
  t.same(found('Tel no 415-555-0132'), ['phone:415-555-0132']);
  t.same(found('Order no. 415-555-0132 shipped'), [], 'an order number');
  t.same(found('Email:jane.doe@acme.com'), ['email:jane.doe@acme.com']);
  t.same(found('contact:ops@corp.example.com'), ['email:ops@corp.example.com']);
  t.same(found('mailto:anna@example.io'), ['email:anna@example.io']);
  t.same(
    found('fetch https://deploy:hunter2@git.example.com/repo.git').filter((f) => f.startsWith('email')),
    [],
    'URL credentials are not an address',
  );
});
