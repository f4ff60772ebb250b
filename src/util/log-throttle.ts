/**
 * At most one log line per key per `intervalMs`, for lines an attacker can make as often as they
 * like (a refusal per connection of a flood): the first line of a key is written, those that follow
 * within the interval are only counted, and the next line written says how many were not
 * (`suppressed`). Metrics count every event; the log stays readable under attack. The keys are the
 * caller's fixed reasons, never request text (the map holds one entry per reason).
 */
export class LogThrottle {
  readonly #last = new Map<string, { at: number; suppressed: number }>();

  constructor(
    private readonly intervalMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * Whether a line for `key` is to be written now: undefined when not (it is counted), else how
   * many lines of the key were not written since the last one that was.
   */
  take(key: string): number | undefined {
    const at = this.now();
    const last = this.#last.get(key);
    if (last !== undefined && at - last.at < this.intervalMs) {
      last.suppressed++;
      return undefined;
    }
    this.#last.set(key, { at, suppressed: 0 });
    return last?.suppressed ?? 0;
  }
}
