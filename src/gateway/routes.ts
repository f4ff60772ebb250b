import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import type { GatewayService } from './service.js';

/** The gateway's routes (spec 2.1–2.3): all-in-one, the sidecar, and the sidecar's forward proxy. */
export function registerGatewayRoutes(router: Router<RouteHandler>, gateway: GatewayService): void {
  router.add('POST', '/v1/chat/completions', gateway.chatCompletions);
  router.add('POST', '/v1/messages', gateway.messages);
  router.add('POST', '/v1/embeddings', gateway.embeddings);
  router.add('GET', '/v1/models', gateway.models);
}
