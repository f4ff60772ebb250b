import { Readable } from 'node:stream';
import t from 'tap';
import { request } from 'undici';
import { ENGINES, startService } from '../helpers/service.js';
import { controlWithSidecar, createSidecarToken } from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

// Plain prose: nothing for the detectors to find, 51 characters a sentence.
const SENTENCE = 'the quarterly report lists every shipment by week. ';
function* chunksOf(text: string): Generator<string> {
  for (let i = 0; i < text.length; i += 1 << 20) yield text.slice(i, i + (1 << 20));
}

const prose = (chars: number): string => SENTENCE.repeat(Math.ceil(chars / SENTENCE.length)).slice(0, chars);

t.test(
  'entries of any size reach the control plane: one as large as a request, and many in one span',
  async (t) => {
    const { control, sc, sidecarId } = await controlWithSidecar(t);
    const govern = (text: string) =>
      sc.call('/v1/govern', {
        token: control.agentKey,
        body: { type: 'TOOL_CALL', payload: { tool: 'docs.write', args: { text } } },
      });

    // A call as large as the 5 MiB request limit allows: its entry alone is over 5 MiB once its
    // hashes and members are added.
    const huge = await govern(prose(5 * 1024 * 1024 - 512));
    t.equal(huge.status, 200, JSON.stringify(huge.body).slice(0, 200));
    t.equal(huge.body.outcome, 'allow');
    // Eight calls of 1.5 MiB together, inside what one seal's time span would hold.
    const many = await Promise.all(Array.from({ length: 8 }, (_, i) => govern(`${i} ${prose(1_500_000)}`)));
    t.same(
      many.map((r) => r.status),
      Array(8).fill(200),
    );
    await waitFor(() => sc.sidecar.shipper.unshipped === 0, 'every entry shipped', 30_000);
    t.equal(sc.sidecar.shipper.failures, 0, 'no push was refused');

    const listed = await control.call('/api/sidecars', { token: control.pat });
    const mine = listed.body.data.find((s: any) => s.sidecar_id === sidecarId);
    t.equal(mine.sync.index, 9, 'the nine entries were taken in');
    const got = await control.call(`/api/audit/pipeline/${huge.body.pipeline_id}`, { token: control.pat });
    t.equal(got.status, 200);
    t.equal(got.body.data[0].personal.args.value.text.length, 5 * 1024 * 1024 - 512, 'whole');
    const integrity = await control.call('/api/audit/integrity?refresh=true', { token: control.pat });
    t.equal(integrity.body.status, 'intact');
  },
);

for (const engine of ENGINES)
  t.test(`only a valid sidecar token may send a batch over 5 MiB (${engine})`, async (t) => {
    const control = await startService({ engine });
    t.teardown(() => control.close());
    const { token } = await createSidecarToken(control, control.pat);
    // 6 MiB of JSON that is not a valid batch: past the body limit, the route says what is wrong.
    const body = `{"epoch":"e","entries":[],"pad":"${'p'.repeat(6 * 1024 * 1024)}"}`;
    const send = async (credential: string | undefined, chunked: boolean) => {
      const res = await request(`${control.url}/api/sync/events`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(credential === undefined ? {} : { authorization: `Bearer ${credential}` }),
        },
        // A stream has no length: undici sends it chunked.
        body: chunked ? Readable.from(chunksOf(body)) : body,
      });
      const json = (await res.body.json()) as { error: { code: string; message: string } };
      if (res.statusCode === 413) t.match(json.error.message, /larger than 5 MiB$/, 'the limit it passed');
      return `${res.statusCode} ${json.error.code}`;
    };
    for (const chunked of [false, true]) {
      const how = chunked ? 'chunked' : 'with a length';
      t.equal(await send(undefined, chunked), '413 payload_too_large', `no credential, ${how}`);
      t.equal(await send(control.pat, chunked), '413 payload_too_large', `a PAT, ${how}`);
      t.equal(
        await send(`gk_sc_${'x'.repeat(40)}`, chunked),
        '413 payload_too_large',
        `an unknown token, ${how}`,
      );
      t.equal(
        await send(token, chunked),
        '400 invalid_request',
        `the sidecar's token, ${how}: read, then refused`,
      );
    }
    // Past a batch's own limit, the refusal names that limit, not the 5 MiB of other requests.
    const huge = await request(`${control.url}/api/sync/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: Readable.from(
        (function* () {
          const mib = Buffer.alloc(1024 * 1024, 0x20);
          for (let i = 0; i < 97; i++) yield mib;
        })(),
      ),
    });
    const refused = (await huge.body.json()) as { error: { code: string; message: string } };
    t.equal(huge.statusCode, 413);
    t.match(refused.error.message, /larger than 96 MiB$/);
  });
