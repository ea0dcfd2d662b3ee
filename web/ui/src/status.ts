import { api } from './api';
import { alertBox, h } from './dom';
import { formatTime } from './time';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
interface Host {
  address: string;
  datacenter: string;
  rack: string;
  up: boolean;
}
interface Status {
  config: string;
  store: Record<string, unknown> & { hosts?: Host[] };
  metrics: Sample[];
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
  const val = (name: string, labels: Record<string, string> = {}) =>
    st.metrics
      .filter((m) => m.name === name && Object.entries(labels).every(([k, v]) => m.labels[k] === v))
      .reduce((n, m) => n + m.value, 0);
  const has = (name: string) => st.metrics.some((m) => m.name === name);

  root.append(
    h('h3', {}, 'Build information'),
    kv('build-info', [
      ['PromQL engine (Prometheus)', build.version],
      ['Revision', build.revision],
      ['Build date', build.buildDate],
      ['Go version', build.goVersion],
      ['Started', has('process_start_time_seconds') ? formatTime(val('process_start_time_seconds') * 1000) : ''],
    ]),
  );

  const s = st.store;
  const store: [string, unknown][] = [
    ['Engine', s.engine],
    s.engine === 'cassandra' ? ['Keyspace', s.keyspace] : ['Directory', s.path],
    ['Ready', s.ready ? 'yes' : 'no (starting)'],
    ['Row time unit', s.row_time_unit],
    ['Row width', s.row_width],
    ['Sample TTL', s.datapoint_ttl_s ? `${s.datapoint_ttl_s}s` : 'none'],
    ['Metric prefix', s.metric_prefix],
  ];
  root.append(h('h3', {}, 'Store'), kv('store-info', store));

  root.append(h('h3', {}, 'Cassandra hosts'));
  if (s.engine !== 'cassandra') {
    root.append(h('p', { className: 'muted', id: 'hosts' }, 'The embedded store has no hosts.'));
  } else {
    const hosts = s.hosts ?? [];
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
  if (has('kairos_adapter_cassandra_in_flight_limit')) caches.push(['Cassandra in-flight limit (adaptive)', val('kairos_adapter_cassandra_in_flight_limit')]);
  caches.push(['HTTP requests in flight', val('kairos_adapter_inflight_requests')]);
  caches.push(['Requests refused by a concurrency limit', val('kairos_adapter_concurrency_limit_rejections_total')]);
  for (const c of ['row_keys', 'row_key_time_index']) {
    const hit = val('kairos_adapter_index_cache_hits_total', { cache: c });
    caches.push([`Index cache ${c}: hits`, pct(hit, hit + val('kairos_adapter_index_cache_misses_total', { cache: c }))]);
  }
  const lk = val('kairos_adapter_read_row_keys_cache_lookups_total');
  caches.push(['Kept row_keys listings: hits', pct(val('kairos_adapter_read_row_keys_cache_lookups_total', { result: 'hit' }), lk)]);
  const entries = (s.cache_entries ?? {}) as Record<string, number>;
  for (const [k, v] of Object.entries(entries)) caches.push([`Cache entries: ${k}`, v]);
  const keptMax = Number(s.row_keys_cache_max ?? 0);
  caches.push([
    'Kept row_keys listings',
    keptMax > 0
      ? `${s.row_keys_listings} listing${s.row_keys_listings === 1 ? '' : 's'}, ${bytes(Number(s.row_keys_cache_bytes ?? 0))} of ${bytes(keptMax)}`
      : 'off',
  ]);
  const bc = s.block_cache as { bytes: number; max_bytes: number; hits: number; misses: number } | undefined;
  if (bc) {
    caches.push(['Pebble block cache', `${bytes(bc.bytes)} of ${bytes(bc.max_bytes)}`]);
    caches.push(['Pebble block cache: hits', pct(bc.hits, bc.hits + bc.misses)]);
  }
  if (has('kairos_adapter_frontend_cache_bytes')) caches.push(['Results cache of range queries', bytes(val('kairos_adapter_frontend_cache_bytes'))]);
  caches.push(['Resident memory', bytes(val('process_resident_memory_bytes'))]);
  caches.push(['Go heap in use', bytes(val('go_memstats_heap_inuse_bytes'))]);
  root.append(h('h3', {}, 'Limits and caches'), kv('caches', caches));

  // The rollup job's progress per resolution: rolled up from the backfill
  // position to the newest bucket end; lag is how far that is behind now.
  const rollups = s.rollups as { resolution: string; from: number; to: number; done: boolean; lag_seconds: number }[] | undefined;
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
