// Preload (`node --import ./force-loopback.mjs ...`) that makes every TCP listen in the process bind
// 127.0.0.1, whatever host the program asked for. Used for peers that listen on every interface.
import net from 'node:net';

const LOOPBACK = '127.0.0.1';
const originalListen = net.Server.prototype.listen;

net.Server.prototype.listen = function listenOnLoopback(...args) {
  const first = args[0];
  if (typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) {
    const cb = typeof args[args.length - 1] === 'function' ? args.pop() : undefined;
    const backlog = args.slice(1).find((x) => typeof x === 'number');
    const next = [Number(first), LOOPBACK];
    if (backlog !== undefined) next.push(backlog);
    if (cb) next.push(cb);
    return originalListen.apply(this, next);
  }
  if (first !== null && typeof first === 'object' && first.path === undefined && first.fd === undefined) {
    if (first.port !== undefined || first.handle === undefined) {
      args[0] = { ...first, host: LOOPBACK, ipv6Only: false };
    }
  }
  return originalListen.apply(this, args);
};
