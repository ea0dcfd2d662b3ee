import uPlot from 'uplot';
import { api } from './api';
import { alertBox, h } from './dom';
import { newEditor } from './editor';
import { displayTime, formatDuration, formatTime, parseDuration, parseTime } from './time';

type Metric = Record<string, string>;
type Sample = [number, string];
interface Series {
  metric: Metric;
  value?: Sample;
  values?: Sample[];
  histogram?: [number, unknown];
  histograms?: [number, unknown][];
}
// The statistics Prometheus's API adds for the stats parameter: timings in
// seconds.
interface QueryStats {
  timings: { evalTotalTime: number; execQueueTime: number; execTotalTime: number };
  samples: { totalQueryableSamples: number; samplesRead: number; peakSamples: number };
}
interface QueryData {
  resultType: 'matrix' | 'vector' | 'scalar' | 'string';
  result: Series[] | Sample;
  stats?: QueryStats;
}

// The range steps of the - and + buttons, as Prometheus offers them.
const ranges = ['1m', '5m', '15m', '30m', '1h', '2h', '6h', '12h', '1d', '2d', '1w', '2w', '4w', '8w', '26w', '1y'].map(
  (r) => parseDuration(r)!,
);
const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

export function seriesName(m: Metric): string {
  const name = m['__name__'] ?? '';
  const rest = Object.entries(m)
    .filter(([k]) => k !== '__name__')
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  return rest.length || !name ? `${name}{${rest.join(', ')}}` : name;
}

function sampleValue(v: string): number | null {
  const f = v === '+Inf' ? Infinity : v === '-Inf' ? -Infinity : Number(v);
  return Number.isFinite(f) ? f : null;
}

// The page's state lives in the URL (Prometheus's parameter names), so a
// view can be shared.
interface State {
  expr: string;
  tab: 'graph' | 'table';
  range: string;
  end: string;
  step: string;
}

function readState(): State {
  const p = new URLSearchParams(location.search);
  const tab = p.get('g0.tab');
  return {
    expr: p.get('g0.expr') ?? '',
    tab: tab === 'table' || tab === '1' ? 'table' : 'graph',
    range: p.get('g0.range_input') ?? '1h',
    end: p.get('g0.end_input') ?? '',
    step: p.get('g0.step_input') ?? '',
  };
}

function writeState(s: State) {
  const p = new URLSearchParams();
  p.set('g0.expr', s.expr);
  p.set('g0.tab', s.tab);
  p.set('g0.range_input', s.range);
  if (s.end) p.set('g0.end_input', s.end);
  if (s.step) p.set('g0.step_input', s.step);
  history.replaceState(null, '', '?' + p.toString());
}

export function graphPage(root: HTMLElement) {
  const st = readState();
  let plot: uPlot | null = null;

  const editorBox = h('div', { className: 'editor', id: 'expr-editor' });
  const execute = h('button', { className: 'btn btn-primary', id: 'execute', onclick: () => run() }, 'Execute');
  const rangeInput = h('input', { id: 'range', className: 'input short', value: st.range, title: 'Range (1h, 30m, 2d...)' });
  const endInput = h('input', { id: 'end', className: 'input', value: displayTime(st.end), placeholder: 'now (UTC or Unix seconds)', title: 'End / evaluation time' });
  const stepInput = h('input', { id: 'step', className: 'input short', value: st.step, placeholder: 'auto', title: 'Resolution (step), e.g. 15s' });
  const stepRange = (dir: number) => {
    const cur = parseDuration(rangeInput.value) ?? 3600_000;
    const next = dir < 0 ? [...ranges].reverse().find((r) => r < cur) : ranges.find((r) => r > cur);
    if (next) rangeInput.value = formatDuration(next);
    run();
  };
  const tabs = {
    graph: h('button', { className: 'tab', id: 'tab-graph', onclick: () => switchTab('graph') }, 'Graph'),
    table: h('button', { className: 'tab', id: 'tab-table', onclick: () => switchTab('table') }, 'Table'),
  };
  const controls = h(
    'div',
    { className: 'controls' },
    h('button', { className: 'btn', title: 'Shorter range', onclick: () => stepRange(-1) }, '−'),
    rangeInput,
    h('button', { className: 'btn', title: 'Longer range', onclick: () => stepRange(1) }, '+'),
    h('label', {}, 'End ', endInput),
    h('label', {}, 'Res. ', stepInput),
  );
  const messages = h('div', { id: 'messages' });
  const stats = h('div', { className: 'stats', id: 'stats' });
  const output = h('div', { id: 'output' });
  root.append(
    h('div', { className: 'query-row' }, editorBox, execute),
    h('div', { className: 'tabs' }, tabs.graph, tabs.table),
    controls,
    messages,
    stats,
    output,
  );
  const editor = newEditor(editorBox, st.expr, () => run());

  function switchTab(t: 'graph' | 'table') {
    st.tab = t;
    run();
  }

  let seq = 0;
  async function run() {
    const my = ++seq;
    st.expr = editor.state.doc.toString();
    st.range = rangeInput.value.trim() || '1h';
    st.end = endInput.value.trim();
    st.step = stepInput.value.trim();
    tabs.graph.classList.toggle('active', st.tab === 'graph');
    tabs.table.classList.toggle('active', st.tab === 'table');
    controls.querySelectorAll('button, #range, #step').forEach((el) => el.toggleAttribute('disabled', st.tab === 'table'));
    writeState(st);
    messages.replaceChildren();
    if (st.expr.trim() === '') {
      stats.replaceChildren();
      output.replaceChildren(h('p', { className: 'muted' }, 'No query entered.'));
      return;
    }
    const rangeMs = parseDuration(st.range);
    const endMs = st.end ? parseTime(st.end) : Date.now();
    const stepMs = st.step ? parseDuration(st.step) : null;
    if (rangeMs === null || rangeMs <= 0 || endMs === null || (st.step && (stepMs === null || stepMs <= 0))) {
      messages.append(alertBox('danger', 'Invalid range, end time or resolution.'));
      return;
    }
    // Prometheus's default resolution: about 250 points over the range.
    const step = stepMs ?? Math.max(Math.floor(rangeMs / 250 / 1000), 1) * 1000;
    const p = new URLSearchParams({ query: st.expr, stats: 'all' });
    if (st.tab === 'graph') {
      p.set('start', String((endMs - rangeMs) / 1000));
      p.set('end', String(endMs / 1000));
      p.set('step', String(step / 1000));
    } else {
      p.set('time', String(endMs / 1000));
    }
    const t0 = performance.now();
    output.classList.add('loading');
    try {
      const res = await api<QueryData>(st.tab === 'graph' ? 'query_range' : 'query', p, 'POST');
      if (my !== seq) return;
      const took = Math.round(performance.now() - t0);
      for (const w of res.warnings) messages.append(alertBox('warning', w));
      for (const i of res.infos) messages.append(alertBox('info', i));
      const n = Array.isArray(res.data.result) && res.data.resultType !== 'scalar' && res.data.resultType !== 'string' ? res.data.result.length : 1;
      stats.textContent =
        `Load time: ${took}ms` + (st.tab === 'graph' ? `   Resolution: ${step / 1000}s` : `   Evaluation time: ${formatTime(endMs)}`) + `   Result series: ${n}`;
      const qs = res.data.stats;
      if (qs) {
        // What the query cost on the server: the engine's own time and
        // the samples its selectors read.
        const ms = (sec: number) => `${Math.round(sec * 1000 * 10) / 10}ms`;
        stats.append(
          h(
            'div',
            {
              id: 'query-stats',
              'data-samples': qs.samples.totalQueryableSamples,
              'data-read': qs.samples.samplesRead,
              'data-peak': qs.samples.peakSamples,
            },
            `Query time: ${ms(qs.timings.execTotalTime)} (evaluation ${ms(qs.timings.evalTotalTime)}, queued ${ms(qs.timings.execQueueTime)})` +
              `   Samples: ${qs.samples.totalQueryableSamples} queried, ${qs.samples.samplesRead} read, ${qs.samples.peakSamples} at peak`,
          ),
        );
      }
      if (st.tab === 'graph') drawGraph(res.data, endMs - rangeMs, endMs, step);
      else drawTable(res.data);
    } catch (e) {
      if (my !== seq) return;
      stats.replaceChildren();
      output.replaceChildren();
      messages.append(alertBox('danger', `Error executing query: ${(e as Error).message}`));
    } finally {
      output.classList.remove('loading');
    }
  }

  function drawGraph(d: QueryData, start: number, end: number, step: number) {
    plot?.destroy();
    plot = null;
    output.replaceChildren();
    if (d.resultType !== 'matrix') {
      output.append(alertBox('danger', `Graph: the result is a ${d.resultType}, not a range vector.`));
      return;
    }
    const series = d.result as Series[];
    const n = Math.floor((end - start) / step) + 1;
    const xs = Array.from({ length: n }, (_, i) => (start + i * step) / 1000);
    const ys: (number | null)[][] = [];
    let points = 0;
    let histograms = 0;
    for (const s of series) {
      const y: (number | null)[] = new Array(n).fill(null);
      for (const [t, v] of s.values ?? []) {
        const i = Math.round((t * 1000 - start) / step);
        if (i >= 0 && i < n) {
          y[i] = sampleValue(v);
          points++;
        }
      }
      histograms += s.histograms?.length ?? 0;
      ys.push(y);
    }
    if (histograms > 0) output.append(alertBox('info', `${histograms} native histogram samples are shown in the table only.`));
    const box = h('div', { className: 'graph', id: 'graph', 'data-series': series.length, 'data-points': points });
    output.append(box);
    if (series.length === 0) {
      box.append(h('p', { className: 'muted' }, 'Empty query result'));
      return;
    }
    plot = new uPlot(
      {
        width: Math.max(box.clientWidth, 300),
        height: 380,
        series: [
          { value: (_u, v) => (v === null ? '' : formatTime(v * 1000)) },
          ...series.map((s, i) => ({
            label: seriesName(s.metric),
            stroke: palette[i % palette.length],
            width: 1.5,
            spanGaps: false,
            points: { show: n < 100 },
          })),
        ],
        axes: [{ values: (_u, vals) => vals.map((v) => formatTime(v * 1000).slice(11, 16)) }, { size: 70 }],
        legend: { live: true },
        cursor: { drag: { x: true, y: false } },
      },
      [xs, ...ys] as uPlot.AlignedData,
      box,
    );
  }

  function drawTable(d: QueryData) {
    plot?.destroy();
    plot = null;
    const rows: HTMLElement[] = [];
    if (d.resultType === 'scalar' || d.resultType === 'string') {
      const [, v] = d.result as Sample;
      rows.push(h('tr', { className: 'series-row' }, h('td', {}, d.resultType), h('td', { className: 'value' }, v)));
    } else {
      for (const s of d.result as Series[]) {
        let val: string;
        if (s.value) val = s.value[1];
        else if (s.histogram) val = JSON.stringify(s.histogram[1]);
        else val = [...(s.values ?? []).map(([t, v]) => `${v} @${t}`), ...(s.histograms ?? []).map(([t, v]) => `${JSON.stringify(v)} @${t}`)].join('\n');
        rows.push(h('tr', { className: 'series-row' }, h('td', { className: 'series' }, seriesName(s.metric)), h('td', { className: 'value' }, val)));
      }
    }
    output.replaceChildren(
      rows.length === 0
        ? h('p', { className: 'muted' }, 'Empty query result')
        : h('table', { className: 'table', id: 'result-table' }, h('tbody', {}, ...rows)),
    );
  }

  run();
}
