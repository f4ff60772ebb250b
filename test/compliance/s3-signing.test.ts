import t from 'tap';
import { s3Signer } from '../../src/compliance/s3-archive.js';

// The signer as the S3 archive configures it reproduces the examples of the S3 documentation
// ("Signature Calculations for the Authorization Header"): a GET of an object with a Range, and a
// bucket listing with a query. Both use the documentation's example credentials and date.
const EXAMPLE = {
  region: 'us-east-1',
  accessKeyId: 'AKIAIOSFODNN7EXAMPLE',
  secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
  sessionToken: undefined,
};
const EMPTY = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
const DATE = new Date('2013-05-24T00:00:00Z');

async function authorization(path: string, query: Record<string, string>, headers: Record<string, string>) {
  const signed = await s3Signer(EXAMPLE).sign(
    {
      method: 'GET',
      protocol: 'https:',
      hostname: 'examplebucket.s3.amazonaws.com',
      path,
      query,
      headers: { host: 'examplebucket.s3.amazonaws.com', 'x-amz-content-sha256': EMPTY, ...headers },
    },
    { signingDate: DATE },
  );
  return signed.headers.authorization as string;
}

t.test('GET Object with a Range', async (t) => {
  const auth = await authorization('/test.txt', {}, { range: 'bytes=0-9' });
  t.equal(
    auth,
    'AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41',
  );
});

t.test('GET Bucket (list objects) with a query', async (t) => {
  const auth = await authorization('/', { 'max-keys': '2', prefix: 'J' }, {});
  t.match(auth, /Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7$/);
});
