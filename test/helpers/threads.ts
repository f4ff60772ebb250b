import { readdirSync, readFileSync } from 'node:fs';

/** Niceness of each thread of this process, by thread id (Linux `/proc`). */
export function threadNices(): Map<number, number> {
  const nices = new Map<number, number>();
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      // Fields after the command name (which may hold spaces): state is field 3, nice field 19.
      nices.set(Number(tid), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]));
    } catch {
      // the thread ended while we looked
    }
  }
  return nices;
}
