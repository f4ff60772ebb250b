/**
 * One wait of a streamed response for its client's connection, shared by both engines. It ends
 * true once `ready()` holds (checked when the adapter calls `check`, at each sign of progress), or
 * false when the adapter calls `settle(false)` (the client went away) or when `progress()` did not
 * move for `stallMs`. The timer exists only while a response waits, never per chunk; it looks a
 * quarter of `stallMs` apart, so a client that took nothing is let go within 1.25 × `stallMs`.
 */
export class StallWait {
  readonly done: Promise<boolean>;
  private resolve!: (ok: boolean) => void;
  private timer: NodeJS.Timeout | undefined;
  private seen: number;
  private idle = 0;

  constructor(
    private readonly ready: () => boolean,
    private readonly progress: () => number,
    stallMs: number,
  ) {
    this.done = new Promise((r) => {
      this.resolve = r;
    });
    this.seen = progress();
    const step = Math.max(1, Math.ceil(stallMs / 4));
    this.timer = setInterval(() => {
      const now = this.progress();
      if (now !== this.seen) {
        this.seen = now;
        this.idle = 0;
        return;
      }
      this.idle += step;
      if (this.idle >= stallMs) this.settle(false);
    }, step);
  }

  /** Ends the wait if the connection took what it had to. */
  check(): void {
    if (this.ready()) this.settle(true);
  }

  settle(ok: boolean): void {
    if (this.timer === undefined) return;
    clearInterval(this.timer);
    this.timer = undefined;
    this.resolve(ok);
  }
}
