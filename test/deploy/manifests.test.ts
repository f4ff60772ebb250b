import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { parseAllDocuments } from 'yaml';
import { SETTINGS } from '../../src/config/schema.js';
import { injectionPatch, SIDECAR_NAME } from '../../src/control/injector.js';

// dist/test/deploy → the repository root
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const DIR = join(ROOT, 'deploy', 'kubernetes');

function docs(file: string): any[] {
  const parsed = parseAllDocuments(readFileSync(join(DIR, file), 'utf8'));
  for (const d of parsed) if (d.errors.length > 0) throw new Error(`${file}: ${d.errors[0]?.message}`);
  return parsed.map((d) => d.toJS());
}

t.test('the Kubernetes manifests parse, and name only settings govgate has', async (t) => {
  const known = new Set<string>(SETTINGS.map((s) => s.env));
  const files = readdirSync(DIR).filter((f) => f.endsWith('.yaml'));
  t.ok(files.length >= 3);
  for (const file of files) {
    for (const doc of docs(file)) {
      t.ok(typeof doc.kind === 'string' && typeof doc.apiVersion === 'string', `${file}: ${doc.kind}`);
      const spec = doc.spec?.template?.spec ?? doc.spec;
      for (const c of spec?.containers ?? [])
        for (const e of c.env ?? [])
          if (String(e.name).startsWith('SERVICE_'))
            t.ok(known.has(e.name), `${file}: ${e.name} is a setting`);
    }
  }
  const [, control] = docs('control-plane.yaml');
  t.same(control.spec.template.spec.containers[0].args, ['control']);
  const [webhook] = docs('injector-webhook.yaml');
  t.equal(webhook.webhooks[0].clientConfig.service.path, '/mutate');
  // The example agent pod is one the injector injects.
  const [pod] = docs('agent-example.yaml');
  const patch = injectionPatch(pod, { image: 'img', controlUrl: 'http://c' });
  t.ok(patch?.some((o) => o.path === '/spec/initContainers' && (o.value as any)[0].name === SIDECAR_NAME));
});
