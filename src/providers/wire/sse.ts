/**
 * Server-sent events (WHATWG HTML "event stream" format): an incremental parser for upstream
 * provider streams and a formatter for what govgate sends.
 *
 * The parser keeps only the unfinished last line between pushes and scans each pushed text once,
 * so its cost is linear in the bytes received whatever the chunking. Lines end with CRLF, LF or
 * CR (a CRLF split across two pushes is handled); a leading BOM is skipped; `:` lines are
 * comments; several `data:` lines are joined with LF; an event with no `data` field is not
 * dispatched. `id` is reported on the event that carried it (no last-event-id carry-over) and
 * `retry` is ignored. Input is text: decode bytes with a streaming decoder first (one that keeps
 * a character split across reads for the next one).
 */

import { ServiceError } from '../../core/errors.js';

/**
 * The longest line or event (its `data` lines joined) a parser takes, in characters: an upstream
 * that never ends a line or an event must not grow a stream's memory without bound. Providers'
 * events are a few KB; a whole answer sent as one event fits many times over.
 */
export const MAX_SSE_EVENT = 8 * 1024 * 1024;

export interface SseEvent {
  /** The `event:` field; absent when not set or empty (the default type, `message`). */
  event?: string;
  data: string;
  id?: string;
}

const LF = 10;
const SPACE = 32;
const CR = 13;
const BOM = 0xfeff;

export class SseParser {
  /**
   * `source` names who sends the stream, for the error when a line or an event is longer than
   * `maxEvent` characters (502 `upstream_error`).
   */
  constructor(
    private readonly source = 'the upstream',
    private readonly maxEvent = MAX_SSE_EVENT,
  ) {}

  /** The unfinished last line of the previous pushes. */
  #partial = '';
  /** The previous push ended with CR: a leading LF in the next one belongs to that CRLF. */
  #afterCr = false;
  #started = false;
  #data = '';
  #hasData = false;
  #event: string | undefined;
  #id: string | undefined;

  /** Feeds the next piece of text; returns the events completed by it. */
  push(text: string): SseEvent[] {
    const events: SseEvent[] = [];
    const len = text.length;
    if (len === 0) return events;
    let start = 0;
    if (this.#afterCr) {
      this.#afterCr = false;
      if (text.charCodeAt(0) === LF) start = 1;
    }
    if (!this.#started) {
      this.#started = true;
      if (text.charCodeAt(0) === BOM) start = 1;
    }
    let lf = text.indexOf('\n', start);
    let cr = text.indexOf('\r', start);
    while (lf !== -1 || cr !== -1) {
      const atCr = cr !== -1 && (lf === -1 || cr < lf);
      const end = atCr ? cr : lf;
      let line = text.slice(start, end);
      if (this.#partial !== '') {
        line = this.#partial + line;
        this.#partial = '';
      }
      this.#line(line, events);
      if (atCr) {
        if (end + 1 === len) {
          this.#afterCr = true;
          start = len;
        } else {
          start = text.charCodeAt(end + 1) === LF ? end + 2 : end + 1;
        }
        cr = text.indexOf('\r', start);
        if (lf !== -1 && lf < start) lf = text.indexOf('\n', start);
      } else {
        start = end + 1;
        lf = text.indexOf('\n', start);
      }
    }
    if (start < len) {
      this.#partial += start === 0 ? text : text.slice(start);
      if (this.#partial.length > this.maxEvent) this.#tooLong();
    }
    return events;
  }

  #tooLong(): never {
    this.#partial = '';
    this.#data = '';
    throw new ServiceError(
      'upstream_error',
      `${this.source} sent a stream event longer than ${this.maxEvent / 1024 / 1024} MiB`,
    );
  }

  /**
   * Ends the stream. The standard drops an event not followed by a blank line; this is lenient
   * and returns it (with an unterminated last line) as upstreams sometimes omit the blank line.
   */
  end(): SseEvent[] {
    const events: SseEvent[] = [];
    if (this.#partial !== '') {
      const line = this.#partial;
      this.#partial = '';
      this.#line(line, events);
    }
    this.#dispatch(events);
    this.#afterCr = false;
    return events;
  }

  #line(line: string, events: SseEvent[]): void {
    if (line === '') {
      this.#dispatch(events);
      return;
    }
    const colon = line.indexOf(':');
    if (colon === 0) return;
    let field: string;
    let value: string;
    if (colon === -1) {
      field = line;
      value = '';
    } else {
      field = line.slice(0, colon);
      const from = line.charCodeAt(colon + 1) === SPACE ? colon + 2 : colon + 1;
      value = line.slice(from);
    }
    switch (field) {
      case 'data':
        if (this.#hasData) {
          this.#data = `${this.#data}\n${value}`;
          if (this.#data.length > this.maxEvent) this.#tooLong();
        } else {
          this.#data = value;
          this.#hasData = true;
        }
        break;
      case 'event':
        this.#event = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.#id = value;
        break;
    }
  }

  #dispatch(events: SseEvent[]): void {
    if (this.#hasData) {
      const event: SseEvent = { data: this.#data };
      if (this.#event) event.event = this.#event;
      if (this.#id !== undefined) event.id = this.#id;
      events.push(event);
    }
    this.#data = '';
    this.#hasData = false;
    this.#event = undefined;
    this.#id = undefined;
  }
}

function assertSingleLine(name: string, value: string): void {
  if (value.includes('\n') || value.includes('\r')) throw new TypeError(`SSE ${name} must be a single line`);
}

/**
 * One SSE event: optional `event:` and `id:` lines, one `data:` line per line of `data` (any of
 * CRLF, CR, LF splits it), and the blank line that dispatches it.
 */
export function formatSse(data: string, event?: string, id?: string): string {
  let head = '';
  if (event !== undefined && event !== '') {
    assertSingleLine('event', event);
    head = `event: ${event}\n`;
  }
  if (id !== undefined) {
    assertSingleLine('id', id);
    head += `id: ${id}\n`;
  }
  if (data.indexOf('\n') === -1 && data.indexOf('\r') === -1) return `${head}data: ${data}\n\n`;
  let out = head;
  let start = 0;
  const len = data.length;
  for (let i = 0; i < len; i++) {
    const c = data.charCodeAt(i);
    if (c !== LF && c !== CR) continue;
    out += `data: ${data.slice(start, i)}\n`;
    if (c === CR && data.charCodeAt(i + 1) === LF) i++;
    start = i + 1;
  }
  return `${out}data: ${data.slice(start)}\n\n`;
}
