import type { DetectionResult, DetectOptions, Finding } from '../core/detect/index.js';
import { type ContentScan, scanTexts, type TextItem } from '../core/guardrails/index.js';
import { JobWorker } from '../util/job-worker.js';

/**
 * Content of at least this many UTF-16 code units in all is scanned off the event loop. The
 * detectors cost ~2 ms per MiB of prose, but up to ~210 ms per MiB of text built to be slow
 * (bench/detect-worst.mjs): inline, a 5 MiB body would hold every other call for a second, and
 * 64 K units hold it for ~13 ms at worst. Below this, a worker's round trip (~0.1 ms) would cost
 * more than the scan.
 */
export const OFFLOAD_CHARS = 64 * 1024;

const WORKER_URL = new URL('./scan-worker.js', import.meta.url);

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
 */
export class ScanPool {
  readonly #worker: JobWorker;
  #offloaded = 0;

  constructor(workerUrl: URL = WORKER_URL) {
    this.#worker = new JobWorker(workerUrl, 'scan');
  }

  /** Scans asked of the worker since the start. */
  get offloaded(): number {
    return this.#offloaded;
  }

  /** Scans queued or running. */
  get pending(): number {
    return this.#worker.pending;
  }

  /** scanTexts(items, opts), the detectors run in the worker. */
  async scan(items: readonly TextItem[], opts: DetectOptions): Promise<ContentScan> {
    const results = await this.#results(
      items.map((i) => i.text),
      opts,
    );
    return scanTexts(items, opts, results);
  }

  /** The findings of each text (an answer's, for the output guard), found in the worker. */
  async detectAll(texts: readonly string[], opts: DetectOptions): Promise<Finding[][]> {
    const results = await this.#results(texts, opts);
    return results.map((r) => (r === null ? [] : r.findings));
  }

  async #results(
    texts: readonly string[],
    opts: DetectOptions,
  ): Promise<readonly (DetectionResult | null)[]> {
    this.#offloaded++;
    const results = await this.#worker.run<readonly (DetectionResult | null)[]>({ texts, opts });
    if (!Array.isArray(results) || results.length !== texts.length)
      throw new Error('scan worker: one result per text expected');
    return results;
  }

  close(): Promise<void> {
    return this.#worker.close();
  }
}
