// Durations as PromQL writes them (1h30m, 2w, 500ms), in milliseconds.
const units: [string, number][] = [
  ['y', 365 * 24 * 3600 * 1000],
  ['w', 7 * 24 * 3600 * 1000],
  ['d', 24 * 3600 * 1000],
  ['h', 3600 * 1000],
  ['m', 60 * 1000],
  ['s', 1000],
  ['ms', 1],
];

export function parseDuration(s: string): number | null {
  const re = /(\d+)(ms|y|w|d|h|m|s)/y;
  s = s.trim();
  if (s === '') return null;
  let ms = 0;
  re.lastIndex = 0;
  while (re.lastIndex < s.length) {
    const m = re.exec(s);
    if (!m) return null;
    ms += Number(m[1]) * units.find(([u]) => u === m[2])![1];
  }
  return ms;
}

export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  let out = '';
  for (const [u, n] of units) {
    if (ms >= n) {
      out += Math.floor(ms / n) + u;
      ms %= n;
    }
  }
  return out;
}

// Times are shown and typed in UTC, as Prometheus shows them by default.
export function formatTime(ms: number): string {
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.000Z$|Z$/, '');
}

export function parseTime(s: string): number | null {
  s = s.trim();
  if (s === '') return null;
  if (/^-?\d+(\.\d+)?$/.test(s)) return Math.round(Number(s) * 1000);
  const t = Date.parse(s.replace(' ', 'T') + (/[zZ]|[+-]\d\d:?\d\d$/.test(s) ? '' : 'Z'));
  return Number.isNaN(t) ? null : t;
}

// displayTime shows a time typed as Unix seconds the way Prometheus shows
// times, and leaves anything else as typed.
export function displayTime(s: string): string {
  const t = /^-?\d+(\.\d+)?$/.test(s.trim()) ? parseTime(s) : null;
  return t === null ? s : formatTime(t);
}
