import { ServiceError } from '../core/errors.js';

type FieldType = 'string' | 'integer' | 'boolean' | 'array' | 'object';

export interface FieldSpec {
  readonly type: FieldType;
  readonly required?: boolean;
  readonly enum?: readonly string[];
  readonly min?: number;
  readonly max?: number;
  readonly maxLength?: number;
  readonly pattern?: RegExp;
  /** `null` is a value of this field (it clears it); otherwise a null is refused like a wrong type. */
  readonly nullable?: boolean;
}

/**
 * `/api` bodies are validated strictly: unknown fields, missing fields and wrong types are all
 * reported at once (400, every problem in the message, the first one as `param`). A `null` is a
 * value only for a `nullable` field: elsewhere it is refused, not read as absent, so no handler
 * meets a null it does not expect (a PUT that nulls a number would otherwise store it).
 */
export function strictBody<T>(body: Record<string, unknown>, spec: Readonly<Record<string, FieldSpec>>): T {
  const problems: { param: string; message: string }[] = [];
  for (const key of Object.keys(body)) {
    if (!Object.hasOwn(spec, key)) problems.push({ param: key, message: `unknown field ${key}` });
  }
  for (const [key, s] of Object.entries(spec)) {
    const v = body[key];
    if (v === undefined) {
      if (s.required) problems.push({ param: key, message: `${key} is required` });
      continue;
    }
    if (v === null) {
      if (s.required) problems.push({ param: key, message: `${key} is required` });
      else if (!s.nullable) problems.push({ param: key, message: `${key} must not be null` });
      continue;
    }
    const ok =
      s.type === 'integer'
        ? typeof v === 'number' && Number.isInteger(v)
        : s.type === 'array'
          ? Array.isArray(v)
          : s.type === 'object'
            ? typeof v === 'object' && !Array.isArray(v)
            : typeof v === s.type;
    if (!ok) {
      problems.push({
        param: key,
        message: `${key} must be ${s.type === 'integer' ? 'an integer' : `a ${s.type}`}`,
      });
      continue;
    }
    if (s.enum && !s.enum.includes(v as string))
      problems.push({ param: key, message: `${key} must be one of ${s.enum.join(', ')}` });
    if (typeof v === 'number' && ((s.min !== undefined && v < s.min) || (s.max !== undefined && v > s.max))) {
      problems.push({ param: key, message: `${key} must be from ${s.min ?? '-∞'} to ${s.max ?? '∞'}` });
    }
    if (typeof v === 'string') {
      if (s.maxLength !== undefined && v.length > s.maxLength) {
        problems.push({ param: key, message: `${key} must be at most ${s.maxLength} characters` });
      }
      if (s.pattern && !s.pattern.test(v))
        problems.push({ param: key, message: `${key} has an invalid format` });
      if (s.required && v.trim() === '') problems.push({ param: key, message: `${key} must not be empty` });
    }
  }
  if (problems.length > 0) {
    throw new ServiceError('invalid_request', problems.map((p) => p.message).join('; '), {
      param: problems[0]?.param ?? '',
    });
  }
  return body as T;
}
