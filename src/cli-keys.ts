import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from './config/index.js';
import { AUDIT_KEYS_FOLDER, AuditKeys } from './crypto/audit-keys.js';
import { MANDATE_KEYS_FOLDER, MandateKeys } from './crypto/mandate-keys.js';
import { ProxyCa } from './sidecar/proxy-ca.js';

const USAGE = `Usage:
  govgate keys audit       print the audit public keys (the --keys file of govgate verify)
  govgate keys mandate     print the mandate public keys (a JWKS)
  govgate keys proxy-ca    print the sidecar forward proxy's CA certificate (PEM)

Reads the keys dir of the configuration (SERVICE_KEYS_DIR, SERVICE_AUDIT_KEY_PASSWORD,
SERVICE_AUDIT_SIGNING_KEY) and never creates keys: a keys dir without them is an error (exit 2).`;

interface KeysIO {
  readonly stdout: { write(s: string): unknown };
  readonly stderr: { write(s: string): unknown };
  readonly env?: NodeJS.ProcessEnv;
}

/**
 * `govgate keys`: the public halves of the keys in the keys dir, offline, without a running
 * service (an auditor's keys file, a verifier's JWKS, the CA an agent must trust).
 */
export function runKeys(argv: string[], io: KeysIO): number {
  const [what, ...rest] = argv;
  if (what === undefined || what === '-h' || what === '--help' || rest.length > 0) {
    (what === undefined || rest.length > 0 ? io.stderr : io.stdout).write(`${USAGE}\n`);
    return what === '-h' || what === '--help' ? 0 : 2;
  }
  const config = loadConfig(io.env ?? process.env);
  const dir = config.keysDir;
  const missing = (folder: string): number => {
    io.stderr.write(`govgate keys: ${join(dir, folder)} holds no keys (SERVICE_KEYS_DIR=${dir})\n`);
    return 2;
  };
  switch (what) {
    case 'audit': {
      if (!existsSync(join(dir, AUDIT_KEYS_FOLDER, 'keys.json'))) return missing(AUDIT_KEYS_FOLDER);
      const keys = AuditKeys.load({
        keysDir: dir,
        password: config.audit.keyPassword,
        signingKeyPem: config.audit.signingKey,
      });
      io.stdout.write(`${JSON.stringify(keys.publicDocument(), null, 2)}\n`);
      return 0;
    }
    case 'mandate': {
      if (!existsSync(join(dir, MANDATE_KEYS_FOLDER, 'keys.json'))) return missing(MANDATE_KEYS_FOLDER);
      const keys = MandateKeys.load(dir, config.audit.keyPassword);
      io.stdout.write(`${JSON.stringify(keys.jwks(), null, 2)}\n`);
      return 0;
    }
    case 'proxy-ca': {
      const path = ProxyCa.certPath(dir);
      if (!existsSync(path)) return missing('proxy');
      io.stdout.write(ProxyCa.readCertificate(dir));
      return 0;
    }
    default:
      io.stderr.write(`govgate keys: unknown key set ${what}\n\n${USAGE}\n`);
      return 2;
  }
}
