/** Control-plane roles, highest first. Each includes every role below it, within its org. */
export const ROLES = ['super_admin', 'admin', 'org_admin', 'developer', 'auditor', 'requester'] as const;
export type Role = (typeof ROLES)[number];

const RANK: Record<Role, number> = {
  super_admin: 6,
  admin: 5,
  org_admin: 4,
  developer: 3,
  auditor: 2,
  requester: 1,
};

export function isRole(value: unknown): value is Role {
  return typeof value === 'string' && Object.hasOwn(RANK, value);
}

export function roleAtLeast(role: Role | null, min: Role): boolean {
  return role !== null && RANK[role] >= RANK[min];
}

/** The lower of two roles (a token can narrow its user's role, never widen it). */
export function minRole(a: Role, b: Role): Role {
  return RANK[a] <= RANK[b] ? a : b;
}
