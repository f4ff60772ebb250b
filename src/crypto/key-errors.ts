/**
 * A key the operator supplied or protected cannot be read: a wrong or missing
 * SERVICE_AUDIT_KEY_PASSWORD, or a SERVICE_AUDIT_SIGNING_KEY that is not an Ed25519 PEM.
 */
export class KeyMaterialError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'KeyMaterialError';
  }
}
