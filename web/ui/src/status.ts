import { api } from './api';
import { alertBox, h } from './dom';
import { formatTime } from './time';

interface Host {
  address: string;
  datacenter: string;
  rack: string;
  up: boolean;
}
interface HitsMisses {
  hits: number;
  misses: number;
}
// Status is /api/v1/status/adapter: each running part's own status (web.Status).
interface Status {
  config: string;
  ready: boolean;
  runtime: { start_time: string; resident_bytes: number; heap_inuse_bytes: number; in_flight_requests: number };
  engine: {
    engine: string;
    keyspace?: string;
    path?: string;
    cassandra?: { hosts: Host[] | null; in_flight_limit: number; queue_timeouts: number };
    block_cache?: { bytes: number; max_bytes: number; hits: number; misses: number };
    commitlog_sync?: string;
    commitlog_sync_period_s?: number;
  };
  store: {
    row_time_unit: string;
    row_width: string;
    datapoint_ttl_s: number;
    metric_prefix: string;
    cache_entries: Record<string, number>;
    index_rows: Record<string, HitsMisses>;
    row_keys_listings: { listings: number; bytes: number; max_bytes: number; lookups: Record<string, number> };
  } | null;
  adapter: { rejections: Record<string, number> };
  frontend: { cache_bytes: number; cache_max_bytes: number };
  rollups: { resolution: string; from: number; to: number; done: boolean; lag_seconds: number }[] | null;
}

function kv(id: string, rows: [string, unknown][]): HTMLElement {
  return h(
    'table',
    { className: 'table narrow', id },
    h('tbody', {}, ...rows.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v ?? ''))))),
  );
}

function bytes(n: number): string {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

const pct = (hit: number, all: number) => (all > 0 ? `${((100 * hit) / all).toFixed(1)} % of ${all}` : 'no lookups yet');

export async function statusPage(root: HTMLElement) {
  root.append(h('h2', {}, 'Status'));
  let build: Record<string, string>;
  let st: Status;
  try {
    [build, st] = await Promise.all([api<Record<string, string>>('status/buildinfo').then((r) => r.data), api<Status>('status/adapter').then((r) => r.data)]);
  } catch (e) {
    root.append(alertBox('danger', `Error loading the status: ${(e as Error).message}`));
    return;
  }
  const sum = (r: Record<string, number> = {}) => Object.values(r).reduce((n, v) => n + v, 0);

  root.append(
    h('h3', {}, 'Build information'),
    kv('build-info', [
      ['PromQL engine (Prometheus)', build.version],
      ['Revision', build.revision],
      ['Build date', build.buildDate],
      ['Go version', build.goVersion],
      ['Started', formatTime(Date.parse(st.runtime.start_time))],
    ]),
  );

  const e = st.engine;
  const s = st.store;
  const store: [string, unknown][] = [
    ['Engine', e.engine],
    e.engine === 'cassandra' ? ['Keyspace', e.keyspace] : ['Directory', e.path],
    ...(e.commitlog_sync
      ? [['Commit log sync', e.commitlog_sync_period_s ? `${e.commitlog_sync}, every ${e.commitlog_sync_period_s}s` : e.commitlog_sync] as [string, unknown]]
      : []),
    ['Ready', st.ready ? 'yes' : 'no (starting)'],
    ['Row time unit', s?.row_time_unit],
    ['Row width', s?.row_width],
    ['Sample TTL', s?.datapoint_ttl_s ? `${s.datapoint_ttl_s}s` : 'none'],
    ['Metric prefix', s?.metric_prefix],
  ];
  root.append(h('h3', {}, 'Store'), kv('store-info', store));

  root.append(h('h3', {}, 'Cassandra hosts'));
  if (e.engine !== 'cassandra') {
    root.append(h('p', { className: 'muted', id: 'hosts' }, 'The embedded store has no hosts.'));
  } else {
    const hosts = e.cassandra?.hosts ?? [];
    root.append(
      h(
        'table',
        { className: 'table narrow', id: 'hosts' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Address'), h('th', {}, 'Datacenter'), h('th', {}, 'Rack'), h('th', {}, 'State'))),
        h(
          'tbody',
          {},
          ...hosts.map((x) =>
            h('tr', {}, h('td', {}, x.address), h('td', {}, x.datacenter), h('td', {}, x.rack), h('td', { className: x.up ? 'up' : 'down' }, x.up ? 'UP' : 'DOWN')),
          ),
        ),
      ),
    );
  }

  const caches: [string, unknown][] = [];
  if (e.cassandra) caches.push(['Cassandra in-flight limit (adaptive)', e.cassandra.in_flight_limit]);
  caches.push(['HTTP requests in flight', st.runtime.in_flight_requests]);
  caches.push(['Requests refused by a concurrency limit', sum(st.adapter.rejections)]);
  for (const c of ['row_keys', 'row_key_time_index']) {
    const r = s?.index_rows[c] ?? { hits: 0, misses: 0 };
    caches.push([`Index cache ${c}: hits`, pct(r.hits, r.hits + r.misses)]);
  }
  const kept = s?.row_keys_listings;
  caches.push(['Kept row_keys listings: hits', pct(kept?.lookups.hit ?? 0, sum(kept?.lookups))]);
  for (const [k, v] of Object.entries(s?.cache_entries ?? {})) caches.push([`Cache entries: ${k}`, v]);
  caches.push([
    'Kept row_keys listings',
    kept && kept.max_bytes > 0 ? `${kept.listings} listing${kept.listings === 1 ? '' : 's'}, ${bytes(kept.bytes)} of ${bytes(kept.max_bytes)}` : 'off',
  ]);
  const bc = e.block_cache;
  if (bc) {
    caches.push(['Pebble block cache', `${bytes(bc.bytes)} of ${bytes(bc.max_bytes)}`]);
    caches.push(['Pebble block cache: hits', pct(bc.hits, bc.hits + bc.misses)]);
  }
  caches.push(['Results cache of range queries', bytes(st.frontend.cache_bytes)]);
  caches.push(['Resident memory', bytes(st.runtime.resident_bytes)]);
  caches.push(['Go heap in use', bytes(st.runtime.heap_inuse_bytes)]);
  root.append(h('h3', {}, 'Limits and caches'), kv('caches', caches));

  // The rollup job's progress per resolution: rolled up from the backfill
  // position to the newest bucket end; lag is how far that is behind now.
  const rollups = st.rollups;
  root.append(h('h3', {}, 'Rollups'));
  if (!rollups) {
    root.append(h('p', { className: 'muted', id: 'rollups' }, 'The rollup job is off (--rollup.resolutions is empty).'));
  } else {
    const when = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');
    root.append(
      h(
        'table',
        { className: 'table narrow', id: 'rollups' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Resolution'), h('th', {}, 'Backfilled to'), h('th', {}, 'Rolled up to'), h('th', {}, 'Lag'))),
        h(
          'tbody',
          {},
          ...rollups.map((r) =>
            h(
              'tr',
              {},
              h('td', {}, r.resolution),
              h('td', {}, r.done ? when(r.from) : 'not started'),
              h('td', {}, r.done ? when(r.to) : ''),
              h('td', {}, r.done ? `${Math.round(r.lag_seconds)} s` : ''),
            ),
          ),
        ),
      ),
    );
  }

  root.append(h('h3', {}, 'Configuration'), h('p', { className: 'muted' }, 'Every flag and YAML key in effect. Secrets are kept in files and only their paths appear.'), h('pre', { id: 'config' }, st.config));
}
