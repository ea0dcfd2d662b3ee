import { api } from './api';
import { alertBox, h } from './dom';
import { displayTime, formatTime, parseDuration, parseTime } from './time';

interface Window {
  start: number;
  series: number;
  dataTypes: Record<string, number>;
  cached: boolean;
}
interface MetricInfo {
  name: string;
  series: number;
  windows: Window[];
  dataTypes: string[];
  type: string;
  help: string;
  unit: string;
  tagIndexed: boolean;
  indexEntriesScanned: number;
  indexEntriesSelected: number;
}

type Col = { key: string; title: string; num?: boolean; get: (m: MetricInfo) => string | number; cell?: (m: MetricInfo) => Node | string };

const ratio = (m: MetricInfo) => (m.indexEntriesSelected > 0 ? m.indexEntriesScanned / m.indexEntriesSelected : 0);

const cols: Col[] = [
  { key: 'name', title: 'Metric', get: (m) => m.name, cell: (m) => h('a', { href: 'graph?g0.expr=' + encodeURIComponent(m.name) + '&g0.tab=table' }, m.name) },
  { key: 'series', title: 'Series', num: true, get: (m) => m.series },
  {
    key: 'windows',
    title: 'Series per row window',
    get: (m) => m.windows.length,
    cell: (m) => m.windows.map((w) => `${formatTime(w.start).slice(0, 10)}: ${w.series}${w.cached ? ' (kept listing)' : ''}`).join('\n'),
  },
  { key: 'dataTypes', title: 'Data types', get: (m) => m.dataTypes.join(', ') },
  { key: 'type', title: 'Type', get: (m) => m.type },
  { key: 'unit', title: 'Unit', get: (m) => m.unit },
  { key: 'help', title: 'Help', get: (m) => m.help },
  { key: 'tagIndexed', title: 'Tag-indexed', get: (m) => (m.tagIndexed ? 'yes' : 'no') },
  { key: 'scanned', title: 'Index entries scanned', num: true, get: (m) => m.indexEntriesScanned },
  { key: 'selected', title: 'selected', num: true, get: (m) => m.indexEntriesSelected },
  { key: 'ratio', title: 'scanned / selected', num: true, get: ratio, cell: (m) => (m.indexEntriesSelected > 0 ? ratio(m).toFixed(1) : '') },
];

export function explorePage(root: HTMLElement) {
  const p = new URLSearchParams(location.search);
  const rangeInput = h('input', { id: 'range', className: 'input short', value: p.get('range') ?? '1h' });
  const endInput = h('input', { id: 'end', className: 'input', value: displayTime(p.get('end') ?? ''), placeholder: 'now (UTC or Unix seconds)' });
  const messages = h('div', { id: 'messages' });
  const body = h('div', { id: 'explorer' });
  let sortKey = p.get('sort') ?? 'series';
  let desc = p.get('order') !== 'asc';
  let metrics: MetricInfo[] = [];
  root.append(
    h('h2', {}, 'Metrics explorer'),
    h(
      'p',
      { className: 'muted' },
      'Series counted from the row_keys index (or a kept listing) of every row window that overlaps the range; no sample is read. ' +
        'Index entries scanned and selected are what reads since start-up looked at and kept: a high ratio marks a metric worth --kairosdb.tag-indexed-metrics.',
    ),
    h(
      'div',
      { className: 'controls' },
      h('label', {}, 'Range ', rangeInput),
      h('label', {}, 'End ', endInput),
      h('button', { className: 'btn btn-primary', id: 'refresh', onclick: () => load() }, 'Refresh'),
    ),
    messages,
    body,
  );

  async function load() {
    messages.replaceChildren();
    const range = parseDuration(rangeInput.value);
    const end = endInput.value ? parseTime(endInput.value) : Date.now();
    if (range === null || end === null) {
      messages.append(alertBox('danger', 'Invalid range or end time.'));
      return;
    }
    const q = new URLSearchParams({ start: String((end - range) / 1000), end: String(end / 1000) });
    const u = new URLSearchParams(location.search);
    u.set('range', rangeInput.value);
    if (endInput.value) u.set('end', endInput.value);
    else u.delete('end');
    history.replaceState(null, '', '?' + u.toString());
    try {
      const res = await api<{ metrics: MetricInfo[] }>('status/metrics', q);
      // A keyspace of more metrics than --query.max-metrics is counted in
      // part: the warning says how much.
      for (const w of res.warnings) messages.append(alertBox('warning', w));
      metrics = res.data.metrics;
      render();
    } catch (e) {
      messages.append(alertBox('danger', `Error loading metrics: ${(e as Error).message}`));
    }
  }

  function render() {
    const col = cols.find((c) => c.key === sortKey) ?? cols[1];
    const sorted = [...metrics].sort((a, b) => {
      const x = col.get(a);
      const y = col.get(b);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return (desc ? -c : c) || (a.name < b.name ? -1 : 1);
    });
    const top = [...metrics].sort((a, b) => b.series - a.series).slice(0, 10);
    const total = metrics.reduce((n, m) => n + m.series, 0);
    body.replaceChildren(
      h('p', { id: 'summary' }, `${metrics.length} metrics, ${total} series (each metric's largest row window).`),
      h('h3', {}, 'Top 10 metrics by series count'),
      h(
        'table',
        { className: 'table narrow', id: 'top-metrics' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Metric'), h('th', {}, 'Series'))),
        h('tbody', {}, ...top.map((m) => h('tr', {}, h('td', {}, m.name), h('td', { className: 'num' }, m.series)))),
      ),
      h('h3', {}, 'All metrics'),
      h(
        'table',
        { className: 'table sortable', id: 'metrics-table' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ...cols.map((c) =>
              h(
                'th',
                {
                  'data-col': c.key,
                  className: c.key === sortKey ? (desc ? 'sorted desc' : 'sorted asc') : '',
                  onclick: () => {
                    desc = c.key === sortKey ? !desc : !!c.num;
                    sortKey = c.key;
                    render();
                  },
                },
                c.title,
              ),
            ),
          ),
        ),
        h(
          'tbody',
          {},
          ...sorted.map((m) =>
            h(
              'tr',
              { 'data-metric': m.name },
              ...cols.map((c) => h('td', { 'data-col': c.key, className: c.num ? 'num' : c.key }, c.cell ? c.cell(m) : String(c.get(m)))),
            ),
          ),
        ),
      ),
    );
  }

  load();
}
