export {
  ApprovalFeed,
  type ApprovalFeedOptions,
  type ApprovalUpdate,
  type FeedTrail,
} from './feed.js';
export { type ApprovalFeedRouteDeps, registerApprovalFeedRoutes } from './feed-routes.js';
export { type ApprovalRouteDeps, registerApprovalRoutes } from './routes.js';
export {
  APPROVAL_STATUSES,
  APPROVAL_TIERS,
  type ApprovalDecision,
  type ApprovalPage,
  type ApprovalRecord,
  type ApprovalStatus,
  ApprovalStore,
  type ApprovalTier,
  type ConsumeOptions,
  type CreateApprovalInput,
  DEFAULT_APPROVAL_TTL_MS,
  MAX_LIVE_PER_AGENT,
  type PreApproveInput,
} from './store.js';
export {
  type WebauthnCredentialRecord,
  WebauthnDesk,
  type WebauthnEvidence,
  type WebauthnSettings,
} from './webauthn.js';
export { registerWebauthnRoutes, type WebauthnRouteDeps } from './webauthn-routes.js';
