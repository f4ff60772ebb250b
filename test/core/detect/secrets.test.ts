import t from 'tap';
import { detect, MIN_SECRET_LENGTH, SECRET_ENTROPY_THRESHOLD } from '../../../src/core/detect/index.js';
import { shannonEntropy } from '../../../src/core/detect/validators.js';
import { newAgentKey, newPat, newSidecarToken } from '../../../src/util/ids.js';
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
  // A token whose body holds no `-` is found after a dash too (`gpt-ghp_…`, a name glued to it).
  const gh = `ghp_${'Ab3'.repeat(12)}`;
  t.same(secrets(`gpt-${gh}`), [['github_token', gh]], 'after a dash');
  t.same(secrets(`model-${`hf_${'Ab3'.repeat(11)}`}`), [['generic_secret', `hf_${'Ab3'.repeat(11)}`]]);
  t.same(secrets(`x_${gh}`), [], 'still not inside a word');
  // Dash-joined tokens are each their own finding.
  t.same(secrets(`${gh}-${gh}`).length, 2, 'two tokens joined by a dash');
});

t.test(
  "govgate's own credentials are secrets: agent keys, personal access tokens, sidecar tokens",
  async (t) => {
    // DESIGN C: `gk_agent_` / `gk_pat_` (and a sidecar's `gk_sc_`) + 40 base62 characters. An agent
    // that pastes its key into a prompt, or a key in a tool argument, must not reach a provider, an
    // export or an alert as it is (spec 6.2, "Redact: API keys, tokens").
    for (const key of [newAgentKey(), newPat(), newSidecarToken()]) {
      t.same(secrets(`my key is ${key}, use it`), [['govgate_key', key]], key.slice(0, 7));
      t.same(secrets(`Authorization: Bearer ${key}`).length, 1, 'found once behind Bearer');
      t.same(secrets(`x${key}`), [], 'not inside a word');
      t.same(secrets(`${key}0`), [], 'one character too long');
      t.same(secrets(key.slice(0, -1)), [], 'one character too short');
    }
  },
);

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

t.test('a secret assigned inside the value of another secret name is found', async (t) => {
  // A value that is not a secret itself is read again for the name=value pairs it holds (the
  // review of session 12 found these missed when such values were skipped whole).
  const cases: [string, string][] = [
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell default value, not a template
    ['DB_PASSWORD="${DB_PASSWORD:-Pr0dDbP4ssw0rd2024}"', '-Pr0dDbP4ssw0rd2024'],
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell default value, not a template
    ['API_TOKEN="${API_TOKEN:-f3a9c2e1b7d84f6a9c0e5b2d7a1f4c8e}"', '-f3a9c2e1b7d84f6a9c0e5b2d7a1f4c8e'],
    [`SECRETS_JSON='{"stripe_secret":"Zq8Wm3Nt6Yb1Xc4Vd7Ke0Lf"}'`, 'Zq8Wm3Nt6Yb1Xc4Vd7Ke0Lf'],
    [
      'password_reset_link=https://app.acme.io/reset?token=8f3a9c2e1b7d4f6a9c0e5b2d7a1f4c8e',
      '8f3a9c2e1b7d4f6a9c0e5b2d7a1f4c8e',
    ],
    [
      '"auth_token":"https://api.acme.io/cb?client_secret=Zq8Wm3Nt6Yb1Xc4Vd7Ke0Lf"',
      'Zq8Wm3Nt6Yb1Xc4Vd7Ke0Lf',
    ],
  ];
  for (const [text, secret] of cases) {
    t.ok(
      secrets(text).some(([type, value]) => type === 'generic_secret' && value === secret),
      `${text}: ${JSON.stringify(secrets(text))}`,
    );
  }
  const aws = `export AWS_CREDENTIALS='{"AccessKeyId":"ASIAXYZ","SecretAccessKey":"wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY9","SessionToken":"FwoGZXIvYXdzEBYaDHx7Qk9"}'`;
  const found = secrets(aws).map(([, value]) => value);
  t.ok(found.includes('wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY9'), `the secret access key: ${found}`);
  t.ok(found.includes('FwoGZXIvYXdzEBYaDHx7Qk9'), 'the session token');
  // The same nesting at the end of a long run of it (past what the scan reads twice) is still
  // scanned at the top level: a secret assigned on its own is found.
  const long = `${'pwd='.repeat(200_000)} api_key = "Zq8Wm3Nt6Yb1Xc4Vd7Ke0Lf"`;
  t.ok(
    secrets(long).some(([, value]) => value === 'Zq8Wm3Nt6Yb1Xc4Vd7Ke0Lf'),
    'a secret after a long run of nested names',
  );
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
