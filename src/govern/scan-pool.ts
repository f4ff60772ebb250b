import type { DetectionResult, DetectOptions, Finding } from '../core/detect/index.js';
import { ServiceError } from '../core/errors.js';
import { type ContentScan, scanTexts, type TextItem } from '../core/guardrails/index.js';
import { type JobCancel, JobDropped, JobWorker } from '../util/job-worker.js';

/**
 * Content of at least this many UTF-16 code units in all is scanned off the event loop. The
 * detectors cost ~2 ms per MiB of prose, but up to ~210 ms per MiB of text built to be slow
 * (bench/detect-worst.mjs): inline, a 5 MiB body would hold every other call for a second, and
 * 64 K units hold it for ~13 ms at worst. Below this, a worker's round trip (~0.1 ms) would cost
 * more than the scan.
 */
export const OFFLOAD_CHARS = 64 * 1024;

const WORKER_URL = new URL('./scan-worker.js', import.meta.url);

/**
 * Large calls held by the pool (waiting for the worker or in it) past which a new one is refused
 * (503). Each holds its body (up to 5 MiB), the parsed request and its texts until its scan ends:
 * measured, 20 bodies of 4.5 MiB of slow text took the process from 347 MB to 1.0 GB of RSS
 * (~33 MB each, ~7 bytes per character of text), for clients long gone. Ordinary large text
 * scans in a few ms per MiB, so the queue fills only with text built to be slow, or with more
 * large calls at once than the worker can scan.
 */
export const MAX_QUEUED_SCANS = 32;
/**
 * Characters (UTF-16 units) of the texts of those calls, in all: 32 Mi are ~230 MB at the
 * measured ~7 bytes a character, and ~7 s of the slowest text at ~213 ms per Mi
 * (bench/detect-worst.mjs): the longest a call at the back of a full queue waits for its scan.
 */
export const MAX_QUEUED_CHARS = 32 * 1024 * 1024;
/**
 * One org's share (429): a quarter of the calls, so one tenant sending slow bodies cannot take
 * the whole queue and refuse every other org's large calls, while an agent may still send eight
 * large documents at once.
 */
export const MAX_QUEUED_SCANS_PER_ORG = 8;
/**
 * One org's share of the characters: half the queue, three 5 MiB bodies of ASCII text (a body's
 * texts hold at most ~5 Mi characters). The first large call of an org, or of an empty queue, is
 * taken whatever its size: no body is refused for its size alone.
 */
export const MAX_QUEUED_CHARS_PER_ORG = 16 * 1024 * 1024;
/**
 * Seconds a refused call is told to wait (Retry-After): room comes back as soon as the scan in
 * the worker ends, at most ~1 s (a 5 MiB body of the slowest text); two leave the queue time to
 * drain a little more, so the retry is likely to fit.
 */
const RETRY_AFTER = { 'retry-after': '2' };

/** A large call refused by the scan queue's bounds (429 rate_limited or 503 unavailable). */
export class ScanQueueFull extends ServiceError {}

/** Who a large call's scan is for. */
export interface ScanCaller {
  /** The org whose share of the queue the scan takes (MAX_QUEUED_SCANS_PER_ORG, _CHARS_). */
  readonly org: string;
  /**
   * The caller's request: a scan still waiting for the worker when it goes away is dropped (it
   * rejects with JobDropped, and the texts are released), never scanned for nobody.
   */
  readonly cancel?: JobCancel;
}

/** What the pool holds: calls waiting for the worker or in it, and their characters. */
interface Held {
  scans: number;
  chars: number;
}

/** Whether `texts` are large enough to be scanned off the event loop (OFFLOAD_CHARS). */
export function isLarge(texts: readonly TextItem[]): boolean {
  let n = 0;
  for (const t of texts) {
    n += t.text.length;
    if (n >= OFFLOAD_CHARS) return true;
  }
  return false;
}

/** isLarge for plain strings (the texts of an answer). */
export function isLargeText(texts: readonly string[]): boolean {
  let n = 0;
  for (const t of texts) {
    n += t.length;
    if (n >= OFFLOAD_CHARS) return true;
  }
  return false;
}

/**
 * The content scan of large calls, in one worker thread at a lower priority than the event loop,
 * one scan at a time (first come, first served): a call built to be slow to scan delays other
 * large calls, never the ordinary ones. A scan that fails (the worker died) rejects: the call
 * fails closed, it is never decided unscanned.
 *
 * The queue is bounded (MAX_QUEUED_*): a call past its org's share is refused with 429, past the
 * whole queue with 503, at once and with Retry-After. A scan is handed to the worker only when it
 * is its turn, so a call whose client leaves while it waits is dropped from the queue.
 */
export class ScanPool {
  readonly #worker: JobWorker;
  readonly #all: Held = { scans: 0, chars: 0 };
  readonly #orgs = new Map<string, Held>();
  #offloaded = 0;
  #dropped = 0;
  #refusedOrg = 0;
  #refusedAll = 0;

  constructor(workerUrl: URL = WORKER_URL) {
    // One job posted at a time: the others wait here, where a call that goes away can be dropped.
    this.#worker = new JobWorker(workerUrl, 'scan', { maxPosted: 1 });
  }

  /** Scans asked of the worker since the start. */
  get offloaded(): number {
    return this.#offloaded;
  }

  /** Scans queued or running. */
  get pending(): number {
    return this.#worker.pending;
  }

  /** Scans dropped from the queue since the start: their client went away before their turn. */
  get dropped(): number {
    return this.#dropped;
  }

  /** Large calls refused since the start: past their org's share, and past the whole queue. */
  get refused(): { readonly org: number; readonly all: number } {
    return { org: this.#refusedOrg, all: this.#refusedAll };
  }

  /**
   * scanTexts(items, opts), the detectors run in the worker. With `caller`, the call is refused
   * past the queue's bounds (a ServiceError: 429 rate_limited past its org's share, 503
   * unavailable past the whole queue), and dropped when its request goes away before its turn.
   */
  async scan(items: readonly TextItem[], opts: DetectOptions, caller?: ScanCaller): Promise<ContentScan> {
    const results = await this.#results(
      items.map((i) => i.text),
      opts,
      caller,
    );
    return scanTexts(items, opts, results);
  }

  /**
   * The findings of each text (an answer's, for the output guard), found in the worker. An
   * answer the provider already gave is never refused; it counts towards the whole queue.
   */
  async detectAll(texts: readonly string[], opts: DetectOptions): Promise<Finding[][]> {
    const results = await this.#results(texts, opts, undefined);
    return results.map((r) => (r === null ? [] : r.findings));
  }

  async #results(
    texts: readonly string[],
    opts: DetectOptions,
    caller: ScanCaller | undefined,
  ): Promise<readonly (DetectionResult | null)[]> {
    let chars = 0;
    for (const t of texts) chars += t.length;
    const org = caller === undefined ? undefined : this.#admit(caller.org, chars);
    this.#offloaded++;
    const all = this.#all;
    all.scans++;
    all.chars += chars;
    let results: readonly (DetectionResult | null)[];
    try {
      results = await this.#worker.run<readonly (DetectionResult | null)[]>(
        { texts, opts },
        { cancel: caller?.cancel },
      );
    } catch (err) {
      if (err instanceof JobDropped) this.#dropped++;
      throw err;
    } finally {
      all.scans--;
      all.chars -= chars;
      if (org !== undefined && caller !== undefined) {
        org.scans--;
        org.chars -= chars;
        if (org.scans === 0) this.#orgs.delete(caller.org);
      }
    }
    if (!Array.isArray(results) || results.length !== texts.length)
      throw new Error('scan worker: one result per text expected');
    return results;
  }

  /**
   * Takes a call of `chars` characters into the org's share, or refuses it. A share or a queue
   * that holds nothing takes any call: the bounds on characters never refuse one body for its
   * size alone.
   */
  #admit(orgId: string, chars: number): Held {
    const org = this.#orgs.get(orgId) ?? { scans: 0, chars: 0 };
    if (
      org.scans >= MAX_QUEUED_SCANS_PER_ORG ||
      (org.scans > 0 && org.chars + chars > MAX_QUEUED_CHARS_PER_ORG)
    ) {
      this.#refusedOrg++;
      throw new ScanQueueFull(
        'rate_limited',
        `this org already has ${org.scans} large calls waiting for the content scan (at most ${MAX_QUEUED_SCANS_PER_ORG}, and ${MAX_QUEUED_CHARS_PER_ORG / (1024 * 1024)} Mi characters); retry after Retry-After`,
        { headers: RETRY_AFTER },
      );
    }
    const all = this.#all;
    if (all.scans >= MAX_QUEUED_SCANS || (all.scans > 0 && all.chars + chars > MAX_QUEUED_CHARS)) {
      this.#refusedAll++;
      throw new ScanQueueFull(
        'unavailable',
        `govgate already has ${all.scans} large calls waiting for the content scan (at most ${MAX_QUEUED_SCANS}, and ${MAX_QUEUED_CHARS / (1024 * 1024)} Mi characters); retry after Retry-After`,
        { headers: RETRY_AFTER },
      );
    }
    org.scans++;
    org.chars += chars;
    this.#orgs.set(orgId, org);
    return org;
  }

  close(): Promise<void> {
    return this.#worker.close();
  }
}
