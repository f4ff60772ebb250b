import t from 'tap';
import {
  cardPrefixValid,
  ibanLength,
  ibanMod97,
  ibanValid,
  luhnValid,
  shannonEntropy,
  ssnValid,
} from '../../../src/core/detect/validators.js';

t.test('luhnValid', async (t) => {
  for (const n of [
    '4111111111111111',
    '5555555555554444',
    '378282246310005',
    '6011111111111117',
    '79927398713',
  ]) {
    t.ok(luhnValid(n), `${n} passes`);
  }
  for (const n of ['4111111111111112', '1234567812345678', '79927398710', '0', '']) {
    t.notOk(luhnValid(n), `${n || '(empty)'} fails`);
  }
  t.ok(luhnValid('4111 1111-1111 1111'), 'separators are skipped');
  t.ok(luhnValid('xx4111111111111111yy', 2, 18), 'range form');
  t.notOk(luhnValid('4111111111111111', 0, 15), 'range cuts the check digit off');
});

t.test('cardPrefixValid', async (t) => {
  t.ok(cardPrefixValid('4111111111111111'), 'visa 16');
  t.ok(cardPrefixValid('4222222222222'), 'visa 13');
  t.ok(cardPrefixValid('5105105105105100'), 'mastercard 51');
  t.ok(cardPrefixValid('2223003122003222'), 'mastercard 2-series');
  t.ok(cardPrefixValid('371449635398431'), 'amex');
  t.ok(cardPrefixValid('6011000990139424'), 'discover');
  t.ok(cardPrefixValid('30569309025904'), 'diners 14');
  t.ok(cardPrefixValid('3566002020360505'), 'jcb');
  t.ok(cardPrefixValid('6200000000000005'), 'unionpay');
  t.notOk(cardPrefixValid('1234567812345670'), 'unknown issuer');
  t.notOk(cardPrefixValid('411111111111111'), 'visa 15 is not a visa length');
  t.notOk(cardPrefixValid('3782822463100050'), 'amex must be 15');
  t.notOk(cardPrefixValid('411111111111'), 'too short');
});

t.test('IBAN mod-97', async (t) => {
  for (const iban of [
    'GB82WEST12345698765432',
    'DE89370400440532013000',
    'FR1420041010050500013M02606',
    'NL91ABNA0417164300',
    'CH9300762011623852957',
    'BE68539007547034',
    'NO9386011117947',
  ]) {
    t.equal(ibanMod97(iban), 1, `${iban} remainder 1`);
    t.ok(ibanValid(iban), `${iban} valid`);
  }
  t.not(ibanMod97('GB83WEST12345698765432'), 1, 'wrong check digits');
  t.notOk(ibanValid('GB83WEST12345698765432'), 'wrong check digits invalid');
  t.notOk(ibanValid('GB82WEST1234569876543'), 'wrong length for GB');
  t.notOk(ibanValid('QQ82WEST12345698765432'), 'unknown country');
  t.notOk(ibanValid('gb82west12345698765432'), 'lowercase is not compact form');
  t.equal(ibanMod97('GB82 WEST'), -1, 'space is bad input');
  t.equal(ibanLength('DE'), 22);
  t.equal(ibanLength('XX'), 0);
});

t.test('IBAN registry: countries added to ISO 13616 lately are known', async (t) => {
  // The registry's own examples (mod 97 = 1).
  for (const iban of [
    'RU0204452560040702810412345678901',
    'LY83002048000020100120361',
    'SD2129010501234001',
    'OM810180000001299123456',
  ]) {
    t.equal(ibanMod97(iban), 1, `${iban} remainder 1`);
    t.ok(ibanValid(iban), `${iban} valid`);
  }
  // Lengths from the registry; a made-up BBAN of that length with computed check digits is valid.
  const lengths: Record<string, number> = { BI: 27, DJ: 27, FK: 18, MN: 20, NI: 28, SO: 23, YE: 30 };
  for (const [country, length] of Object.entries(lengths)) {
    t.equal(ibanLength(country), length, country);
    const bban = '1234567890123456789012345678'.slice(0, length - 4);
    const numeric = `${bban}${country}00`.replace(/[A-Z]/g, (c) => String(c.charCodeAt(0) - 55));
    const check = 98 - Number(BigInt(numeric) % 97n);
    t.ok(ibanValid(`${country}${String(check).padStart(2, '0')}${bban}`), `${country} valid`);
  }
});

t.test('shannonEntropy', async (t) => {
  t.equal(shannonEntropy(''), 0);
  t.equal(shannonEntropy('aaaaaaaa'), 0);
  t.equal(shannonEntropy('abababab'), 1);
  t.equal(shannonEntropy('abcd'), 2);
  t.equal(shannonEntropy('0123456789abcdef'), 4);
  t.equal(shannonEntropy('xxabcdxx', 2, 6), 2, 'range form');
  t.equal(shannonEntropy('éèéè'), 1, 'non-ASCII characters count too');
  t.equal(shannonEntropy('aéaé'), 1, 'mixed');
  // Internal counters are reset between calls.
  t.equal(shannonEntropy('abcd'), 2);
  t.ok(shannonEntropy('Zr8Qk2LmN4vB7xT1pW9s') > 4, 'random base62 is high');
  t.ok(shannonEntropy('passwordpassword') < 3, 'a repeated word is low');
});

t.test('ssnValid', async (t) => {
  t.ok(ssnValid(123, 45, 6789));
  t.ok(ssnValid(78, 5, 1120));
  t.notOk(ssnValid(0, 12, 3456), 'area 000');
  t.notOk(ssnValid(666, 12, 3456), 'area 666');
  t.notOk(ssnValid(901, 12, 3456), 'area 9xx');
  t.notOk(ssnValid(123, 0, 3456), 'group 00');
  t.notOk(ssnValid(123, 45, 0), 'serial 0000');
});
