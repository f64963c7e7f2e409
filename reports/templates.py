"""The Markdown and HTML templates (jinja2), kept in Python so an installed package carries them."""

from __future__ import annotations

CSS = """
:root { --fg:#0f172a; --muted:#64748b; --line:#e2e8f0; --bg:#ffffff; --soft:#f8fafc;
        --bad:#b91c1c; --badbg:#fee2e2; --warn:#92400e; --warnbg:#fef3c7; --ok:#166534; --okbg:#dcfce7;
        --accent:#1d4ed8; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 -apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Liberation Sans","DejaVu Sans",sans-serif;
       color:var(--fg); background:var(--bg); }
main { max-width:1180px; margin:0 auto; padding:0 24px 48px; }
header.top { background:#0f172a; color:#f8fafc; padding:18px 24px 14px; }
header.top .inner { max-width:1180px; margin:0 auto; }
header.top h1 { margin:0 0 4px; font-size:22px; font-weight:650; }
header.top .sub { color:#cbd5e1; font-size:13px; }
nav { position:sticky; top:0; background:#f1f5f9; border-bottom:1px solid var(--line); z-index:2; }
nav .inner { max-width:1180px; margin:0 auto; padding:7px 24px; display:flex; gap:16px; flex-wrap:wrap; }
nav a { color:var(--accent); text-decoration:none; font-size:13px; }
nav a:hover { text-decoration:underline; }
h2 { font-size:18px; margin:30px 0 10px; padding-bottom:4px; border-bottom:2px solid var(--line); }
h3 { font-size:15px; margin:0 0 6px; }
.cards { display:flex; gap:12px; flex-wrap:wrap; margin:18px 0 6px; }
.card { border:1px solid var(--line); border-radius:8px; padding:10px 14px; min-width:130px; background:var(--soft); }
.card .v { font-size:22px; font-weight:650; }
.card .l { color:var(--muted); font-size:12px; }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px; font-weight:600;
         border:1px solid transparent; white-space:nowrap; }
.status-clean { background:var(--okbg); color:var(--ok); }
.status-findings { background:var(--badbg); color:var(--bad); }
.status-incomplete, .status-empty, .status-known, .status-interrupted { background:var(--warnbg); color:var(--warn); }
.known { background:var(--warnbg); color:var(--warn); }
article.finding.is-known { border-left-color:#f59e0b; }
.kind-mismatch { background:#fee2e2; color:#991b1b; }
.kind-contract { background:#ede9fe; color:#5b21b6; }
.kind-validation-gap { background:#fef3c7; color:#92400e; }
.kind-crash { background:#1f2937; color:#f9fafb; }
table { border-collapse:collapse; width:100%; margin:6px 0 14px; font-size:13px; }
th, td { border-bottom:1px solid var(--line); padding:5px 8px; text-align:left; vertical-align:top; }
th { background:var(--soft); font-weight:600; position:sticky; top:33px; }
td.n, th.n { text-align:right; font-variant-numeric:tabular-nums; }
tbody tr:hover { background:#f1f5f9; }
td.ok { color:var(--ok); } td.warn { color:var(--warn); background:var(--warnbg); }
td.bad { color:var(--bad); background:var(--badbg); font-weight:600; } td.na { color:var(--muted); }
.notes { border-left:4px solid #f59e0b; background:var(--warnbg); padding:8px 14px; border-radius:4px; }
.notes li { margin:2px 0; }
.empty { color:var(--muted); font-style:italic; }
article.finding { border:1px solid var(--line); border-left:4px solid var(--bad); border-radius:6px;
                  padding:10px 14px; margin:12px 0; background:#fff; }
article.finding:target { box-shadow:0 0 0 3px #93c5fd; }
article.finding .meta { color:var(--muted); font-size:12.5px; margin-bottom:6px; }
article.finding .meta b { color:var(--fg); font-weight:600; }
pre { background:var(--soft); border:1px solid var(--line); border-radius:5px; padding:8px 10px;
      overflow-x:auto; font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;
      white-space:pre-wrap; word-break:break-word; margin:4px 0 8px; }
pre.repro { background:#0f172a; color:#e2e8f0; border-color:#0f172a; }
.label { font-size:12px; font-weight:600; color:var(--muted); text-transform:uppercase; letter-spacing:.03em; }
a.anchor { color:var(--muted); text-decoration:none; margin-right:4px; }
svg.plot { width:100%; height:auto; max-width:1000px; display:block; margin:4px 0 12px; }
details summary { cursor:pointer; color:var(--accent); font-size:12.5px; }
footer { color:var(--muted); font-size:12px; margin-top:36px; border-top:1px solid var(--line); padding-top:8px; }
td.id { min-width:9em; }
pre, code, li, p, .meta, .headline, summary { overflow-wrap:anywhere; word-break:break-word; }
th, td { overflow-wrap:break-word; }
table.fixed { table-layout:fixed; }
table.fixed td, table.fixed th { overflow-wrap:anywhere; }
td details summary { white-space:nowrap; }
ol.headlines { margin:6px 0 10px; padding-left:22px; }
ol.headlines li { margin:3px 0; }
details.fold > summary { margin:2px 0 6px; }
code { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace; }
"""

FOLD = """{% macro fold(n, what) %}<details class="fold"{% if n <= FOLD_ROWS %} open{% endif %}><summary>{{ n }} {{ what }}{% if n > FOLD_ROWS %}: show them{% endif %}</summary>{% endmacro %}"""
"""``fold(n, what)`` opens a ``<details>`` around a table or list of ``n`` rows, closed when longer
than ``FOLD_ROWS`` so the page stays short; the caller closes it with ``</details>``."""

HTML = FOLD + """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kernel-oracle report: {{ r.kind }} run, {{ r.created }}</title>
<style>{{ css|safe }}</style>
</head>
<body>
<header class="top"><div class="inner">
<h1>kernel-oracle: {{ r.kind }} run <span class="badge status-{{ r.status }}">{{ r.status }}</span></h1>
<div class="sub">{{ r.created }} · device {{ env.get('device') or '?' }} ({{ env.get('gpu') or env.get('cpu') or '?' }})
 · commit <code>{{ (env.get('git_commit') or 'unknown')[:12] }}</code> · suite {{ env.get('suite_version') or '?' }}
 {% if r.source %}· <code>{{ r.source }}</code>{% endif %}</div>
</div></header>
<nav><div class="inner">
<a href="#summary">Summary</a>
<a href="#headlines">What failed ({{ r.headlines|length }})</a>
<a href="#by-op">By target and op</a>
<a href="#ratios">Error ratios</a>
{% if r.notes %}<a href="#notes">Notes ({{ r.notes|length }})</a>{% endif %}
{% if r.raw.get('release_matrix') %}<a href="#release-matrix">Release matrix</a>{% endif %}
<a href="#findings">Findings ({{ r.findings|length }})</a>
{% if r.validation_gaps %}<a href="#validation-gaps">Validation gaps ({{ r.validation_gaps|length }})</a>{% endif %}
{% if r.coverage or r.coverage_unknown %}<a href="#coverage">Tile coverage</a>{% endif %}
<a href="#groups">Groups ({{ r.groups|length }})</a>
<a href="#benchmarks">Benchmarks ({{ r.benchmarks|length }})</a>
<a href="#targets">Targets</a>
<a href="#environment">Environment</a>
</div></nav>
<main>
<section id="summary">
<div class="cards">
<div class="card"><div class="v">{{ r.fuzz_cases }}</div><div class="l">cases run{% if r.selfcheck_rows %} (and {{ r.selfcheck_rows }} selfcheck rows){% endif %}</div></div>
<div class="card"><div class="v">{{ r.fuzz_passes }}</div><div class="l">passed{% if r.fuzz_cases %} ({{ (r.fuzz_passes / r.fuzz_cases)|pct }}){% endif %}{% if r.gaps %}; {{ r.gaps }} validation gaps (accepted malformed metadata, not failures){% endif %}{% if r.selfcheck_rows %}; selfcheck {{ r.selfcheck_passes }} of {{ r.selfcheck_rows }}{% endif %}</div></div>
<div class="card"><div class="v">{{ r.findings|length }}</div><div class="l">findings:
{% for k, n in r.findings_by_kind.items() if n %}{{ n }} {{ k }}{% if not loop.last %}, {% endif %}{% else %}none{% endfor %}{% if r.known_findings %}; {{ r.known_findings|length }} known upstream{% endif %}</div></div>
<div class="card"><div class="v">{{ r.ratio_max|ratio }}</div><div class="l">worst error ratio (≤ 1 passes)</div></div>
<div class="card"><div class="v">{{ r.benchmarks|length }}</div><div class="l">benchmarks</div></div>
{% if r.summary.get('duration_s') is not none %}<div class="card"><div class="v">{{ r.summary['duration_s']|num }} s</div>
<div class="l">wall time{% if r.summary.get('time_s') %} (budget {{ r.summary['time_s']|num }} s){% endif %}</div></div>{% endif %}
</div>
</section>
<section id="headlines">
<h2>What failed</h2>
{% if not r.findings %}<p class="empty">No findings.</p>
{% else %}<ol class="headlines">
{% for h in r.headlines %}<li><a href="#{{ h.anchor }}">{{ h.id }}</a>{% if h.known %} <span class="badge known">known</span>{% endif %}: <span class="headline">{{ h.text }}</span>{% if h.tail %} <span class="where">{{ h.tail }}</span>{% endif %}</li>
{% endfor %}</ol>{% endif %}
</section>
<section id="by-op">
<h2>By target and op</h2>
{% if not by_op %}<p class="empty">No cases were run.</p>{% else %}
<table>
<thead><tr><th>op</th><th>target</th><th>dtypes</th><th class="n">cases</th><th class="n">passes</th><th class="n">findings</th><th class="n">ratio max</th><th class="n">ratio median</th></tr></thead>
<tbody>
{% for row in by_op %}<tr><td>{{ row.op }}</td><td>{{ row.target }}</td><td>{{ row.dtypes }}</td><td class="n">{{ row.cases }}</td><td class="n">{{ row.passes }}</td>
<td class="n {{ 'bad' if row.findings else '' }}">{{ row.findings }}</td>
<td class="n {{ row.ratio_max|ratio_class }}">{{ row.ratio_max|ratio }}</td><td class="n {{ row.ratio_median|ratio_class }}">{{ row.ratio_median|ratio }}</td></tr>
{% endfor %}</tbody></table>{% endif %}
</section>
<section id="ratios">
<h2>Error ratio distributions</h2>
<p>Each case's error against the float64 reference divided by what the tolerance rule allows (err ≤ k·err(same-dtype baseline) + floor); 1 is the limit. Points above 1 are red.</p>
{% if plots.ratios %}{{ plots.ratios|safe }}{% else %}<p class="empty">{{ plots_unavailable or 'No error ratios were recorded.' }}</p>{% endif %}
</section>
{% if r.notes %}
<section id="notes">
<h2>Notes</h2>
<div class="notes"><ul>
{% for n in r.notes %}<li>{{ n }}</li>
{% endfor %}</ul></div>
</section>
{% endif %}
{# ---- release matrix (kernel-oracle matrix): each finding bucket per release ---- #}
{% set m = r.raw.get('release_matrix') %}
{% if m %}
<section id="release-matrix">
<h2>Release matrix</h2>
<p>Each finding bucket (one root cause) per release, oldest first: failing cases found in each release's campaign
(– : the release did not run; <i>replay</i>: its campaign missed it, but another release's example fails there
too), <b>introduced in</b> the first release that has it, <b>fixed in</b> the release after the last one that has it.</p>
<table>
<thead><tr><th>bucket</th>{% for rel in m.releases %}<th class="n">{{ rel.spec }}</th>{% endfor %}<th>introduced in</th><th>fixed in</th></tr></thead>
<tbody>
{% for row in m.rows %}<tr><td>{{ row.bucket }}</td>{% for rel in m.releases %}{% set n = row.counts.get(rel.spec) %}{% set rp = rel.spec in (row.replayed or {}) %}<td class="n {{ 'na' if n is none else ('bad' if n or rp else 'ok') }}">{{ '–' if n is none else ('replay' if rp and not n else n) }}</td>{% endfor %}<td>{{ row.introduced_in or '–' }}</td><td>{{ row.fixed_in or '–' }}</td></tr>
{% else %}<tr><td colspan="{{ m.releases|length + 3 }}" class="empty">No findings in any release.</td></tr>
{% endfor %}
<tr><td><i>cases run</i></td>{% for rel in m.releases %}<td class="n {{ '' if rel.available else 'warn' }}">{{ rel.cases if rel.available else 'unavailable' }}</td>{% endfor %}<td></td><td></td></tr>
<tr><td><i>of them to known issues (skipped)</i></td>{% for rel in m.releases %}<td class="n">{{ rel.known_cases|default(0) }} ({{ rel.known_skipped|default(0) }})</td>{% endfor %}<td></td><td></td></tr>
<tr><td><i>validation gaps</i></td>{% for rel in m.releases %}<td class="n">{{ rel.validation_gaps|default(0) }}</td>{% endfor %}<td></td><td></td></tr>
</tbody></table>
{% if m.corpus %}
<h3>Real-bug corpus</h3>
<table>
<thead><tr><th>entry</th><th>status</th>{% for rel in m.releases %}<th>{{ rel.spec }}</th>{% endfor %}</tr></thead>
<tbody>
{% for c in m.corpus %}<tr><td><a href="{{ c.upstream if c.upstream.startswith('http') else '#' }}">{{ c.id }}</a><br><span class="l">{{ c.title }}</span></td><td>{{ c.status }}</td>
{% for rel in m.releases %}{% set x = c.results.get(rel.spec) %}<td class="{{ 'na' if x is none or x.as_expected is none else ('ok' if x.as_expected else 'bad') }}">{{ '–' if x is none else x.outcome }}{% if x is not none and x.expected %} (expected: {{ x.expected }}){% endif %}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>
{% endif %}
</section>
{% endif %}
<section id="findings">
<h2>Findings ({{ r.findings|length }})</h2>
{% if not r.findings %}<p class="empty">No findings.</p>
{% else %}
<p>Repro commands run from the folder of the record{% if r.source %} (<code>{{ r.source }}</code>){% endif %}: paths are relative to it.</p>
{% if r.known_findings %}<p>{{ r.known_findings|length }} of the {{ r.findings|length }} findings are known upstream issues (<code>{{ r.summary.get('known_issues_file') or 'harness/known_issues.toml' }}</code>): they are listed with their upstream link and do not fail the run.</p>{% endif %}
{{ fold(r.findings|length, 'findings') }}
<table class="fixed">
<colgroup><col style="width:15em"><col style="width:10em"><col style="width:10em"><col style="width:8em"><col style="width:8em"><col style="width:7em"><col><col style="width:4.5em"><col style="width:5em"></colgroup>
<thead><tr><th>finding</th><th>kind</th><th>target</th><th>op</th><th>dtype</th><th>shape class</th><th>what</th><th class="n">cases</th><th class="n">ratio</th></tr></thead>
<tbody>
{% for f in r.findings %}<tr><td class="id"><a href="#{{ f.anchor }}">{{ f.id }}</a>{% if f.known %} <span class="badge known">known</span>{% endif %}</td><td><span class="badge kind-{{ f.kind }}">{{ f.kind }}</span></td>
<td>{{ f.target }}</td><td>{{ f.ops|join(', ') }}</td><td>{{ f.dtype }}</td><td>{{ f.shape_class }}</td><td>{{ f.first_line|truncate(110) }}</td>
<td class="n">{{ f.count }}</td><td class="n {{ f.ratio|ratio_class if f.ratio is not none else 'na' }}">{{ f.ratio|ratio }}</td></tr>
{% endfor %}</tbody></table></details>
<h3 id="buckets">Buckets</h3>
<p>One row per root cause (bucket): how many failing cases it had, the repro of its smallest example, and up to three more examples.</p>
{{ fold(r.findings|length, 'buckets') }}
<table class="fixed">
<colgroup><col style="width:26%"><col style="width:15em"><col style="width:4.5em"><col style="width:28%"><col></colgroup>
<thead><tr><th>bucket</th><th>finding</th><th class="n">cases</th><th>smallest example</th><th>more examples</th></tr></thead>
<tbody>
{% for f in r.findings %}<tr><td>{{ f.bucket.label }}{% if f.known %}<br><span class="badge known">known</span> {% if f.upstream %}<a href="{{ f.upstream }}">{{ f.known }}</a>{% else %}{{ f.known }}{% endif %}{% endif %}</td>
<td class="id"><a href="#{{ f.anchor }}">{{ f.id }}</a></td><td class="n">{{ f.count }}</td>
<td>{% if f.repro %}<code>{{ f.repro }}</code>{% else %}<span class="empty">no repro recorded</span>{% endif %}</td>
<td>{% for ex in f.example_lines %}<code>{{ ex }}</code>{% if not loop.last %}<br>{% endif %}{% else %}–{% endfor %}</td></tr>
{% endfor %}</tbody></table></details>
{% for f in r.findings %}
<article class="finding{{ ' is-known' if f.known else '' }}" id="{{ f.anchor }}">
<h3><a class="anchor" href="#{{ f.anchor }}">#</a>{{ f.id }} <span class="badge kind-{{ f.kind }}">{{ f.kind }}</span>{% if f.known %} <span class="badge known">known</span>{% endif %}</h3>
{% if f.known %}<p class="known-issue">Known upstream issue <b>{{ f.known }}</b>{% if f.upstream %}: <a href="{{ f.upstream }}">{{ f.upstream }}</a>{% endif %}</p>{% endif %}
<div class="meta"><b>target</b> {{ f.target }} · <b>op</b> {{ f.op }} · <b>dtype</b> {{ f.dtype }} · <b>shape class</b> {{ f.shape_class }}
{% if f.contract %} · <b>contract</b> <code>{{ f.contract }}</code>{% endif %}
{% for k, v in f.figures.items() if k != 'where' %} · <b>{{ k }}</b> {{ v|num if v is number else v }}{% endfor %}
 · <b>bucket</b> {{ f.bucket.label }} · <b>failing cases</b> {{ f.count }}</div>
<div class="label">message</div>
<pre class="message">{{ f.message }}</pre>
{% if f.figures.get('where') %}<div class="label">where</div>
<pre>{% for k, v in f.figures['where'].items() %}{{ k }}={{ v }}{% if not loop.last %}  {% endif %}{% endfor %}</pre>{% endif %}
<div class="label">reproduce</div>
{% if f.repro %}<pre class="repro"><code>{{ f.repro }}</code></pre>
{% else %}<p class="empty">no repro command was recorded for this finding</p>{% endif %}
{% if f.example_lines %}<div class="label">more examples of this bucket</div>
{{ fold(f.example_lines|length, 'examples') }}<ul class="examples">{% for ex in f.example_lines %}<li><code>{{ ex }}</code></li>{% endfor %}</ul></details>{% endif %}
{% if f.problem is not none %}<details><summary>problem (plain data)</summary><pre>{{ f.problem|tojson(indent=1) }}</pre></details>{% endif %}
</article>
{% endfor %}
{% endif %}
</section>
{% set gaps = r.validation_gaps %}
{% if gaps %}
<section id="validation-gaps">
<h2>Validation gaps ({{ gaps|length }})</h2>
<p>Informational, not findings: malformed inputs a target accepts where the reference rejects them, and what follows from it. They do not fail the run.</p>
{{ fold(gaps|length, 'validation gaps') }}
<table class="fixed">
<colgroup><col style="width:9em"><col style="width:16em"><col style="width:13em"><col style="width:11em"><col style="width:5em"><col></colgroup>
<thead><tr><th>op</th><th>malformation</th><th>consequence</th><th>dtypes</th><th class="n">cases</th><th>example</th></tr></thead>
<tbody>
{% for g in gaps %}<tr><td>{{ g.op }}</td><td>{{ g.malformation }}</td><td>{{ g.consequence }}</td><td>{{ g.dtypes }}</td><td class="n">{{ g.count }}</td><td><details><summary>repro command</summary><code>{{ g.example }}</code></details></td></tr>
{% endfor %}</tbody></table></details>
</section>
{% endif %}
{% set cov = r.coverage %}
{% if cov or r.coverage_unknown %}
<section id="coverage">
<h2>Tile coverage</h2>
<p>{{ COVERAGE_TEXT }}</p>
{{ fold(cov|length, 'rows') }}
<table>
<thead><tr><th>target</th><th>op</th><th>dimension</th><th>blocks</th><th class="n">cases</th>{% for k in COVERAGE_CLASSES %}<th class="n">{{ k }}</th>{% endfor %}</tr></thead>
<tbody>
{% for c in cov %}<tr><td>{{ c.target }}</td><td>{{ c.op }}</td><td>{{ c.dim }}</td><td>{{ c.blocks }}</td><td class="n">{{ c.cases }}</td>{% for k in COVERAGE_CLASSES %}<td class="n">{{ c[k]|pct }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table></details>
{% for u in r.coverage_unknown %}<p>{{ u.target }}, {{ u.family }}: no coverage rows ({{ u.reason }})</p>
{% endfor %}
</section>
{% endif %}
<section id="groups">
<h2>Groups: target × op × dtype × shape class</h2>
{% if not r.groups %}<p class="empty">No groups.</p>{% else %}
{{ fold(groups|length, 'groups') }}
<table>
<thead><tr><th>target</th><th>op</th><th>dtype</th><th>shape class</th><th>precision</th><th class="n">cases</th><th class="n">passes</th>
{% for k in FINDING_KINDS %}<th class="n">{{ k }}</th>{% endfor %}<th class="n">ratio max</th><th class="n">ratio median</th></tr></thead>
<tbody>
{% for g in groups %}<tr><td>{{ g.target }}</td><td>{{ g.op }}</td><td>{{ g.dtype }}</td><td>{{ g.shape_class }}</td><td>{{ g.precision or '–' }}</td>
<td class="n">{{ g.cases }}</td><td class="n">{{ g.passes }}</td>
{% for k in FINDING_KINDS %}<td class="n {{ 'bad' if g.findings[k] else '' }}">{{ g.findings[k] }}</td>{% endfor %}
<td class="n {{ g.ratio_max|ratio_class }}">{{ g.ratio_max|ratio }}</td><td class="n {{ g.ratio_median|ratio_class }}">{{ g.ratio_median|ratio }}</td></tr>
{% endfor %}</tbody></table></details>{% endif %}
</section>
<section id="benchmarks">
<h2>Benchmarks</h2>
{% if not r.benchmarks %}<p class="empty">No benchmarks in this record.</p>{% else %}
{{ fold(benches|length, 'benchmarks') }}
<table>
<thead><tr><th>target</th><th>op</th><th>shape</th><th>dtype</th><th class="n">median µs</th><th class="n">TB/s</th><th class="n">TFLOP/s</th><th class="n">% roofline</th>
{% for p in peers %}<th class="n">vs {{ p }}</th>{% endfor %}</tr></thead>
<tbody>
{% for b in benches %}<tr><td>{{ b.target }}</td><td>{{ b.op }}</td><td>{{ b.shape }}</td><td>{{ b.dtype }}</td><td class="n">{{ b.median_us|us }}</td>
<td class="n">{{ b.tbps|num }}</td><td class="n">{{ b.tflops|num }}</td><td class="n">{{ b.roofline_fraction|pct }}</td>
{% for p in peers %}{% set s = b.speedup_over(p) %}<td class="n {{ '' if s is none else ('ok' if s >= 1 else 'warn') }}">{{ s|speedup }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table></details>
<p>“vs peer”: the peer's median time divided by the target's (above 1× the target is faster).</p>
<h3>Speed against peers</h3>
{% if plots.bench %}{{ plots.bench|safe }}{% else %}<p class="empty">{{ plots_unavailable or 'Nothing to plot.' }}</p>{% endif %}
<h3>Against the roofline</h3>
{% if plots.roofline %}{{ plots.roofline|safe }}{% else %}<p class="empty">{{ plots_unavailable or 'No bytes, FLOPs or ceilings were recorded, so there is no roofline to draw.' }}</p>{% endif %}
{% endif %}
</section>
<section id="targets">
<h2>Targets</h2>
{% if not r.targets %}<p class="empty">The record lists no targets.</p>{% else %}
<table class="fixed">
<colgroup><col style="width:13em"><col style="width:7em"><col style="width:7em"><col style="width:7em"><col style="width:15%"><col style="width:22%"><col></colgroup>
<thead><tr><th>name</th><th>available</th><th>strict</th><th>precision</th><th>entry points</th><th>missing entry points</th><th>reason / note</th></tr></thead>
<tbody>
{% for t in r.target_rows() %}<tr><td>{{ t.name }}</td><td class="{{ 'ok' if t.available else 'warn' }}">{{ 'yes' if t.available else 'no' }}</td>
<td>{{ t.strict }}</td><td>{{ t.precision }}</td><td>{{ t.entry_points }}</td><td class="{{ 'warn' if t.missing != '-' else '' }}">{{ t.missing }}</td><td>{{ t.reason }}</td></tr>
{% endfor %}</tbody></table>{% endif %}
</section>
<section id="environment">
<h2>Environment</h2>
<table><tbody>
{% for k, v in env|dictsort %}<tr><th>{{ k }}</th><td><code>{{ v }}</code></td></tr>
{% endfor %}
<tr><th>seeds</th><td><code>{{ r.seeds|tojson }}</code></td></tr>
{% for k, v in r.summary|dictsort %}<tr><th>summary.{{ k }}</th><td><code>{{ v }}</code></td></tr>
{% endfor %}</tbody></table>
</section>
<footer>kernel-oracle result schema v{{ r.version }}, record kind “{{ r.kind }}”. Generated by <code>kernel-oracle report</code>; self-contained page (no external resources).</footer>
</main>
</body>
</html>
"""

MARKDOWN = """{% macro fold_md(n, what) %}{% if n > FOLD_ROWS %}<details><summary>{{ n }} {{ what }}</summary>

{% endif %}{% endmacro %}{% macro unfold_md(n) %}{% if n > FOLD_ROWS %}

</details>
{% endif %}{% endmacro %}# kernel-oracle: {{ r.kind }} run ({{ r.status }})

{{ r.created }} · device {{ env.get('device') or '?' }} ({{ env.get('gpu') or env.get('cpu') or '?' }}) · commit {{ (env.get('git_commit') or 'unknown')[:12]|code }} · suite {{ env.get('suite_version') or '?' }}

| cases | passed | validation gaps | selfcheck rows | findings | worst error ratio | benchmarks |
|---:|---:|---:|---:|---:|---:|---:|
| {{ r.fuzz_cases }} | {{ r.fuzz_passes }} | {{ r.gaps }} | {{ r.selfcheck_rows }}{% if r.selfcheck_rows %} ({{ r.selfcheck_passes }} passed){% endif %} | {{ r.findings|length }}{% for k, n in r.findings_by_kind.items() if n %}{% if loop.first %} ({% endif %}{{ n }} {{ k }}{% if not loop.last %}, {% else %}){% endif %}{% endfor %}{% if r.known_findings %}; {{ r.known_findings|length }} known upstream{% endif %} | {{ r.ratio_max|ratio }} | {{ r.benchmarks|length }} |

{% if r.findings %}

## What failed

{% for h in r.headlines %}
{{ loop.index }}. [{{ h.id|cell }}](#{{ h.anchor }}){% if h.known %} (known){% endif %}: {{ h.text|cell }}{{ h.tail|cell }}
{% endfor %}
{% else %}

No findings.
{% endif %}

## By target and op

{% if not by_op %}
No cases were run.
{% else %}
| op | target | dtypes | cases | passes | findings | ratio max | ratio median |
|---|---|---|---:|---:|---:|---:|---:|
{% for row in by_op %}
| {{ row.op|cell }} | {{ row.target|cell }} | {{ row.dtypes|cell }} | {{ row.cases }} | {{ row.passes }} | {{ row.findings }} | {{ row.ratio_max|ratio }} | {{ row.ratio_median|ratio }} |
{% endfor %}
{% endif %}

The error-ratio plot is in the HTML page beside this file.
{% if r.notes %}

## Notes

{% for n in r.notes %}
- {{ n|cell }}
{% endfor %}
{% endif %}

{% set m = r.raw.get('release_matrix') %}
{% if m %}

## Release matrix

Each finding bucket (one root cause) per release, oldest first: failing cases found in each release's campaign (– : the release did not run; *replay*: its campaign missed it, but another release's example fails there too), *introduced in* the first release that has it, *fixed in* the release after the last one that has it.

| bucket | {% for rel in m.releases %}{{ rel.spec|cell }} | {% endfor %}introduced in | fixed in |
|---|{% for rel in m.releases %}---:|{% endfor %}---|---|
{% for row in m.rows %}
| {{ row.bucket|cell }} | {% for rel in m.releases %}{% set n = row.counts.get(rel.spec) %}{{ '–' if n is none else ('replay' if rel.spec in (row.replayed or {}) and not n else n) }} | {% endfor %}{{ (row.introduced_in or '–')|cell }} | {{ (row.fixed_in or '–')|cell }} |
{% endfor %}
| *cases run* | {% for rel in m.releases %}{{ rel.cases if rel.available else 'unavailable' }} | {% endfor %} | |
| *of them to known issues (skipped)* | {% for rel in m.releases %}{{ rel.known_cases|default(0) }} ({{ rel.known_skipped|default(0) }}) | {% endfor %} | |
| *validation gaps* | {% for rel in m.releases %}{{ rel.validation_gaps|default(0) }} | {% endfor %} | |
{% if m.corpus %}

Real-bug corpus (expected outcome in parentheses):

| entry | status | {% for rel in m.releases %}{{ rel.spec|cell }} | {% endfor %}

|---|---|{% for rel in m.releases %}---|{% endfor %}

{% for c in m.corpus %}
| {{ c.id|cell }} ({{ c.upstream|cell }}) | {{ c.status }} | {% for rel in m.releases %}{% set x = c.results.get(rel.spec) %}{{ '–' if x is none else x.outcome|cell }}{% if x is not none and x.expected %} ({{ x.expected }}){% endif %} | {% endfor %}

{% endfor %}
{% endif %}
{% endif %}

## Findings ({{ r.findings|length }})

{% if not r.findings %}
No findings.
{% else %}
{% if r.known_findings %}
{{ r.known_findings|length }} of the {{ r.findings|length }} findings are known upstream issues (`{{ r.summary.get('known_issues_file') or 'harness/known_issues.toml' }}`): they are listed with their upstream link and do not fail the run.

{% endif %}
{{ fold_md(r.findings|length, 'findings')|safe }}
| finding | kind | target | op | dtype | shape class | what | cases |
|---|---|---|---|---|---|---|---:|
{% for f in r.findings %}
| [{{ f.id|cell }}](#{{ f.anchor }}){% if f.known %} (known){% endif %} | {{ f.kind|cell }} | {{ f.target|cell }} | {{ f.op|cell }} | {{ f.dtype|cell }} | {{ f.shape_class|cell }} | {{ f.first_line|clip(100)|cell }} | {{ f.count }} |
{% endfor %}
{{ unfold_md(r.findings|length)|safe }}

### Buckets

One row per root cause (bucket): how many failing cases it had, the repro of its smallest example, and up to three more examples.

{{ fold_md(r.findings|length, 'buckets')|safe }}
| bucket | finding | cases | smallest example | more examples |
|---|---|---:|---|---|
{% for f in r.findings %}
| {{ f.bucket.label|clip|cell }}{% if f.known %} (known: {{ f.known|link(f.upstream) }}){% endif %} | [{{ f.id|cell }}](#{{ f.anchor }}) | {{ f.count }} | {{ (f.repro or 'no repro recorded')|code(in_table=True) }} | {% for ex in f.example_lines %}{{ ex|code(in_table=True) }}{% if not loop.last %}<br>{% endif %}{% else %}–{% endfor %} |
{% endfor %}
{{ unfold_md(r.findings|length)|safe }}
{% for f in r.findings %}

<a id="{{ f.anchor }}"></a>
### {{ f.id|cell }} ({{ f.kind|cell }}{% if f.known %}, known{% endif %})

{% if f.known %}
**Known upstream issue** {{ f.known|link(f.upstream) }}{% if f.upstream %}: {{ f.upstream|md }}{% endif %}


{% endif %}
target {{ f.target|code }} · op {{ f.op|code }} · dtype {{ f.dtype|code }} · shape class {{ f.shape_class|code }}{% if f.contract %} · contract {{ f.contract|code }}{% endif %}{% if f.ratio is not none %} · ratio {{ f.ratio|ratio }}{% endif %} · bucket {{ f.bucket.label|code }} · failing cases {{ f.count }}


{{ f.message|fence('text') }}

Reproduce:

{{ (f.repro or '# no repro command was recorded for this finding')|fence('bash') }}
{% if f.example_lines %}

More examples of this bucket:

{% for ex in f.example_lines %}
- {{ ex|code }}
{% endfor %}
{% endif %}
{% endfor %}
{% endif %}

{% set gaps = r.validation_gaps %}
{% if gaps %}
## Validation gaps ({{ gaps|length }})

Informational, not findings: malformed inputs a target accepts where the reference rejects them, and what follows from it. They do not fail the run.

{{ fold_md(gaps|length, 'validation gaps')|safe }}
| op | malformation | consequence | dtypes | cases | example |
|---|---|---|---|---:|---|
{% for g in gaps %}
| {{ g.op|cell }} | {{ g.malformation|clip|cell }} | {{ g.consequence|clip|cell }} | {{ g.dtypes|cell }} | {{ g.count }} | {{ g.example|clip|code(in_table=True) }} |
{% endfor %}
{{ unfold_md(gaps|length)|safe }}

{% endif %}
{% set cov = r.coverage %}
{% if cov or r.coverage_unknown %}
## Tile coverage

{{ COVERAGE_TEXT }}

{{ fold_md(cov|length, 'rows')|safe }}
| target | op | dimension | blocks | cases | {% for k in COVERAGE_CLASSES %}{{ k }} | {% endfor %}

|---|---|---|---|---:|{% for k in COVERAGE_CLASSES %}---:|{% endfor %}

{% for c in cov %}
| {{ c.target|cell }} | {{ c.op|cell }} | {{ c.dim|cell }} | {{ c.blocks|cell }} | {{ c.cases }} | {% for k in COVERAGE_CLASSES %}{{ c[k]|pct }} | {% endfor %}

{% endfor %}
{{ unfold_md(cov|length)|safe }}
{% for u in r.coverage_unknown %}
- {{ u.target|cell }}, {{ u.family|cell }}: no coverage rows ({{ u.reason|cell }})
{% endfor %}

{% endif %}
## Groups: target × op × dtype × shape class

{% if not r.groups %}
No groups.
{% else %}
{{ fold_md(groups|length, 'groups')|safe }}
| target | op | dtype | shape class | precision | cases | passes | {% for k in FINDING_KINDS %}{{ k }} | {% endfor %}ratio max | ratio median |
|---|---|---|---|---|---:|---:|{% for k in FINDING_KINDS %}---:|{% endfor %}---:|---:|
{% for g in groups %}
| {{ g.target|cell }} | {{ g.op|cell }} | {{ g.dtype|cell }} | {{ g.shape_class|cell }} | {{ g.precision or '–' }} | {{ g.cases }} | {{ g.passes }} | {% for k in FINDING_KINDS %}{{ g.findings[k] }} | {% endfor %}{{ g.ratio_max|ratio }} | {{ g.ratio_median|ratio }} |
{% endfor %}
{{ unfold_md(groups|length)|safe }}
{% endif %}

## Benchmarks

{% if not r.benchmarks %}
No benchmarks in this record.
{% else %}
| target | op | shape | dtype | median µs | TB/s | TFLOP/s | % roofline | {% for p in peers %}vs {{ p|cell }} | {% endfor %}

|---|---|---|---|---:|---:|---:|---:|{% for p in peers %}---:|{% endfor %}

{% for b in benches %}
| {{ b.target|cell }} | {{ b.op|cell }} | {{ b.shape|cell }} | {{ b.dtype|cell }} | {{ b.median_us|us }} | {{ b.tbps|num }} | {{ b.tflops|num }} | {{ b.roofline_fraction|pct }} | {% for p in peers %}{{ b.speedup_over(p)|speedup }} | {% endfor %}

{% endfor %}

"vs peer": the peer's median time divided by the target's (above 1× the target is faster).
{% endif %}

## Targets

{% if not r.targets %}
The record lists no targets.
{% else %}
| name | available | strict | precision | entry points | missing entry points | reason / note |
|---|---|---|---|---|---|---|
{% for t in r.target_rows() %}
| {{ t.name|cell }} | {{ 'yes' if t.available else 'no' }} | {{ t.strict }} | {{ t.precision|cell }} | {{ t.entry_points|clip|cell }} | {{ t.missing|clip(200)|cell }} | {{ t.reason|clip(200)|cell }} |
{% endfor %}
{% endif %}

## Environment

| key | value |
|---|---|
{% for k, v in env|dictsort %}
| {{ k|cell }} | {{ v|code(in_table=True) }} |
{% endfor %}
| seeds | {{ r.seeds|tojson|code(in_table=True) }} |

_kernel-oracle result schema v{{ r.version }}, record kind "{{ r.kind }}"; the HTML page beside this file has the plots._
"""
