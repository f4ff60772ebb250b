import { join } from 'node:path';

/** The SERVICE_* settings every test service starts from: loopback, any port, all state in `dir`. */
export function testServiceEnv(dir: string, bootstrapToken: string): Record<string, string> {
  return {
    SERVICE_HOST: '127.0.0.1',
    SERVICE_PORT: '0',
    SERVICE_DATA_DIR: join(dir, 'data'),
    SERVICE_KEYS_DIR: join(dir, 'keys'),
    SERVICE_BOOTSTRAP_TOKEN: bootstrapToken,
    SERVICE_LOG_LEVEL: 'error',
  };
}
