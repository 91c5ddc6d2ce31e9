/** sfc32: the same data for the same seed on every machine and Node version. */
export class SeededRandom {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number, stream = '') {
    // A sequence per stream (consumer): its data does not depend on the order of adding.
    const h = fnv1a(`${seed}:${stream}`);
    this.a = h ^ 0x9e3779b9;
    this.b = fnv1a(`${stream}#${seed}`);
    this.c = Math.imul(h, 0x85ebca6b) >>> 0;
    this.d = 1;
    for (let i = 0; i < 15; i++) this.next();
  }

  /** Each step is taken mod 2^32 (`| 0`, `>>>`), so the fields need no normalising. */
  next(): number {
    let t = (this.a + this.b) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.d = (this.d + 1) | 0;
    t = (t + this.d) | 0;
    this.c = (this.c + t) | 0;
    return (t >>> 0) / 4294967296;
  }

  /** In [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  chance(probability: number): boolean {
    return this.next() < probability;
  }

  pick<T>(values: readonly T[]): T {
    return values[Math.floor(this.next() * values.length)] as T;
  }

  hex(length: number): string {
    let out = '';
    for (let i = 0; i < length; i++) out += Math.floor(this.next() * 16).toString(16);
    return out;
  }

  uuid(): string {
    const h = this.hex(32).split('');
    h[12] = '4';
    h[16] = '89ab'[Math.floor(this.next() * 4)] ?? '8';
    const s = h.join('');
    return `${s.slice(0, 8)}-${s.slice(8, 12)}-${s.slice(12, 16)}-${s.slice(16, 20)}-${s.slice(20)}`;
  }
}

function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}
