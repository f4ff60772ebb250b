import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

/**
 * Lowers the calling worker thread's scheduling priority by `steps` of niceness (relative, so a
 * service started at −20 keeps its threads ordered), leaving the process and its event loop
 * alone: on Linux a thread id names one thread. Background work (seal signing, integrity scans)
 * then yields a contended core to request handling. Elsewhere, or without permission, nothing
 * changes. Returns the niceness set, or undefined.
 */
export function lowerThreadPriority(steps: number): number | undefined {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (!Number.isSafeInteger(tid) || tid <= 0 || tid === process.pid) return undefined;
    const nice = Math.min(19, getPriority(tid) + steps);
    setPriority(tid, nice);
    return nice;
  } catch {
    return undefined;
  }
}
