import t from 'tap';
import { ENGINES, startService } from '../helpers/service.js';

// Both engines read a query string alike: everything after the first `?` (node:http dropped what
// followed a second one), and a parameter given twice is refused (the first won, unchecked).
for (const engine of ENGINES) {
  t.test(`the query string, read alike by both engines (${engine})`, async (t) => {
    const svc = await startService({ engine });
    t.teardown(() => svc.close());
    const status = async (q: string) => (await svc.call(`/api/audit${q}`, { token: svc.pat })).status;
    t.equal(await status('?limit=2'), 200);
    t.equal(await status('?limit=2?zzz=1'), 400, 'a second ? is part of the value');
    t.equal(await status('??limit=1'), 200, 'a leading ? of the query is dropped, on both');
    const twice = await svc.call('/api/audit?limit=1&limit=2', { token: svc.pat });
    t.equal(twice.status, 400);
    t.equal(twice.body.error.param, 'limit');
  });
}
