/** Counts requests in flight so a server can drain them before it closes. */
export class InFlight {
  /** Set when the drain begins; read once per request and once per answer (a plain field read). */
  draining = false;
  /**
   * Set when the drain's time is up and the connections left are closed: an answer aborted from
   * then on was cut by the service, not left by its client.
   */
  cutOff = false;
  /** Requests entered since the start (how a retired uWS app sees that it had none for a while). */
  entered = 0;
  private count = 0;
  private waiters: (() => void)[] = [];

  enter(): void {
    this.count++;
    this.entered++;
  }

  /** A bound function: it may be handed on as a callback (`promise.then(work.leave)`). */
  readonly leave = (): void => {
    this.count--;
    if (this.count === 0 && this.waiters.length > 0) {
      for (const w of this.waiters.splice(0)) w();
    }
  };

  get size(): number {
    return this.count;
  }

  /** Resolves when nothing is in flight (no timer: it waits as long as a request runs). */
  idle(): Promise<void> {
    if (this.count === 0) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Resolves when nothing is in flight, or after `ms`. */
  drained(ms: number): Promise<void> {
    if (this.count === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      timer.unref();
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
