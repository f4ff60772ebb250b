import t from 'tap';
import { detect, MIN_SECRET_LENGTH, SECRET_ENTROPY_THRESHOLD } from '../../../src/core/detect/index.js';
import { shannonEntropy } from '../../../src/core/detect/validators.js';
import { checkCorpus } from './corpus.js';

function secrets(text: string): [string, string][] {
  return detect(text, { pii: false, injection: false, unicode: false }).findings.map((f) => [
    f.type,
    text.slice(f.start, f.end),
  ]);
}

t.test('corpus: precision and recall', async (t) => {
  const cases = checkCorpus(t, 'secrets.json', 'secret', 'secrets');
  for (const c of cases.filter((c) => c.expect.length === 0)) {
    t.same(secrets(c.text), [], `no secret in negative: ${c.text.slice(0, 50)}`);
  }
});

t.test('vendor tokens need their exact shape and a clean boundary', async (t) => {
  t.same(secrets('AKIAIOSFODNN7EXAMPLE'), [['aws_access_key', 'AKIAIOSFODNN7EXAMPLE']]);
  t.same(secrets('AKIAIOSFODNN7EXAMPLEX'), [], 'one character too long');
  t.same(secrets('xAKIAIOSFODNN7EXAMPLE'), [], 'inside a word');
  t.same(secrets(`ghp_${'a1'.repeat(17)}`), [], 'github token too short');
  t.same(secrets(`sk-${'abcdefghij'.repeat(3)}`), [], 'openai-looking value without a digit');
  t.same(secrets(`sk-ant-api03-${'Ab3'.repeat(10)}`), [
    ['anthropic_key', `sk-ant-api03-${'Ab3'.repeat(10)}`],
  ]);
});

t.test('JWT is one finding over all three segments', async (t) => {
  const jwt =
    'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.' +
    'eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.' +
    'SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c';
  t.same(secrets(`token=${jwt};`), [['jwt', jwt]], 'the assignment scanner does not report it twice');
  t.same(secrets('eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.'), [], 'unsigned token');
});

t.test('private keys', async (t) => {
  const body = 'MIIEvQIBADANBgkqhkiG9w0BAQEFAASC'.repeat(4);
  const pem = `-----BEGIN PRIVATE KEY-----\n${body}\n-----END PRIVATE KEY-----`;
  t.same(secrets(`x ${pem} y`), [['private_key', pem]]);
  t.same(
    secrets(`-----BEGIN PRIVATE KEY-----\n${body.slice(0, 40)}\n-----END PRIVATE KEY-----`),
    [],
    'short body',
  );
  t.same(secrets(`-----BEGIN PUBLIC KEY-----\n${body}\n-----END PUBLIC KEY-----`), [], 'public key');
  const cut = `-----BEGIN EC PRIVATE KEY-----\n${body}`;
  t.same(secrets(`${cut}\n`), [['private_key', cut]], 'truncated block runs to its body end');
});

t.test('connection strings: the password span', async (t) => {
  t.same(secrets('amqps://svc:Q2w3e4r5@mq.example.net/vh'), [['connection_string', 'Q2w3e4r5']]);
  t.same(secrets('Data Source=db;User Id=sa;Pwd=Zx9!Zx9!;'), [['connection_string', 'Zx9!Zx9!']]);
  t.same(secrets('redis://:changeme@cache:6379'), [], 'placeholder password');
  t.same(secrets('https://user@example.com/path'), [], 'no password');
});

t.test('generic assignments: entropy, length and names', async (t) => {
  const strong = 'Zr8Qk2LmN4vB7xT1pW9s';
  t.ok(shannonEntropy(strong) >= SECRET_ENTROPY_THRESHOLD);
  t.same(secrets(`client_secret = "${strong}"`), [['generic_secret', strong]]);
  t.same(
    secrets(`client_secret = "${strong.slice(0, MIN_SECRET_LENGTH - 1)}"`),
    [],
    'shorter than the minimum',
  );
  t.same(secrets('client_secret = "aaaaaaaaaaaaaaaaaaaa1"'), [], 'low entropy');
  t.same(secrets('client_secret = "abcdefghijklmnopqrstu"'), [], 'no digit and no mixed case');
  t.same(secrets(`client_secret_name = "${strong}"`), [], 'names a secret, does not hold one');
  t.same(secrets(`monkey = "${strong}"`), [], 'not a secret name');
  t.same(secrets(`"apiKey": "${strong}"`), [['generic_secret', strong]], 'JSON');
  t.same(secrets(`api-key: ${strong}`), [['generic_secret', strong]], 'YAML / header');
  t.same(secrets(`password := "Pa55word!x"`), [['generic_secret', 'Pa55word!x']], 'Go, shorter password');
  t.same(secrets(`token = ${strong}(x)`), [], 'a call, not a value');
});
