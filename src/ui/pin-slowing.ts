/**
 * The PIN's limit across all client addresses. The lock of auth.ts stops one device, but
 * someone with the ~250 addresses of the cab's /24 would still try all 10,000 4-digit PINs
 * in about 40 minutes. A lock for everyone would let any passenger lock the driver out, so
 * this only slows, and never the driver's phone: once the wrong PINs from all addresses pass
 * a small allowance (a count that halves every hour), an address's next PIN is checked only
 * some time after its own last wrong one: 1 min after one, 10 min after two, then 1 h, 4 h,
 * and 12 h from the fifth on. An address with no wrong PIN in the last day (the driver's
 * phone) is checked at once. Each address has its own turn: one wait shared by all would be
 * a race the guesser's script always wins, the driver never. A wait is a time to come
 * back, answered at once: no timer, no request held, nothing that piles up. Kept in memory:
 * the page cannot restart the agent, and writing each wrong PIN to disk would let a guesser
 * wear the SD card. Figures (days to try every PIN, the driver's longest wait): docs/driver-page.md.
 */
export const SLOW_ALLOWANCE = 10;
export const SLOW_HALF_LIFE_MS = 3_600_000;
/**
 * The wait after an address's 1st, 2nd, ... wrong PIN while slowed. The first ones are short
 * (a driver's typo); each one a guesser gets quickly is 254 PINs from a /24, so they grow fast.
 */
export const SLOW_WAITS_MS = [60_000, 600_000, 3_600_000, 4 * 3_600_000, 12 * 3_600_000] as const;
/** An address with no wrong PIN for a day starts clean again. */
export const SLOW_FORGET_MS = 24 * 3_600_000;
/** Addresses tracked: a /22; a cab's Wi-Fi is a /24 (IPv6 counts by /64, see clientKey()). */
const MAX_ADDRESSES = 1024;

interface Wrongs {
  count: number;
  lastMs: number;
}

export class PinSlowing {
  private score = 0;
  private scoreAtMs = 0;
  /** Wrong PINs by clientKey(), oldest last wrong PIN first. */
  private readonly addresses = new Map<string, Wrongs>();

  /** `now`: a monotonic clock, so a step of the system clock neither ends nor stretches a wait. */
  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Recent wrong PINs from all addresses, each counting less as it ages. */
  recentWrong(): number {
    return this.score * 2 ** (-(this.now() - this.scoreAtMs) / SLOW_HALF_LIFE_MS);
  }

  get on(): boolean {
    return this.recentWrong() >= SLOW_ALLOWANCE;
  }

  /** How long `client` (a clientKey()) must wait before its PIN is checked; 0: now. */
  waitMs(client: string): number {
    const recent = this.recentWrong();
    if (recent < SLOW_ALLOWANCE) return 0;
    // Come back when this address's turn comes, or sooner if the slowing ends by itself.
    const offInMs = Math.ceil(SLOW_HALF_LIFE_MS * Math.log2(recent / SLOW_ALLOWANCE)) + 1;
    const now = this.now();
    const w = this.known(client, now);
    if (w) return Math.min(offInMs, Math.max(0, w.lastMs + delayMs(w.count) - now));
    if (this.addresses.size < MAX_ADDRESSES) return 0;
    // More addresses than tracked: a new one waits until the oldest is forgotten, else a
    // flood of addresses would each get a check at once.
    const oldest = this.addresses.values().next().value!;
    return Math.min(offInMs, oldest.lastMs + SLOW_FORGET_MS - now);
  }

  /** A wrong PIN from `client`, checked (its wait was 0). */
  wrong(client: string): void {
    const now = this.now();
    this.score = this.recentWrong() + 1;
    this.scoreAtMs = now;
    const w = this.known(client, now) ?? { count: 0, lastMs: now };
    this.addresses.delete(client);
    if (this.addresses.size >= MAX_ADDRESSES) this.addresses.delete(this.addresses.keys().next().value!);
    this.addresses.set(client, { count: w.count + 1, lastMs: now });
  }

  /** The right PIN from `client`: its wrong ones are forgotten (a typo costs nothing later). The global count is not touched. */
  right(client: string): void {
    this.addresses.delete(client);
  }

  /** `client`'s wrong PINs of the last day, dropping those of addresses quiet for a day. */
  private known(client: string, now: number): Wrongs | undefined {
    for (const [k, v] of this.addresses) {
      if (v.lastMs + SLOW_FORGET_MS > now) break;
      this.addresses.delete(k);
    }
    return this.addresses.get(client);
  }
}

/** The wait after an address's `count`-th wrong PIN while slowed. */
export function delayMs(count: number): number {
  return count <= 0 ? 0 : SLOW_WAITS_MS[Math.min(count, SLOW_WAITS_MS.length) - 1];
}
