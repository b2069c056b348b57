// plguard view: the page script. Plain JavaScript, no build step, no network but the
// viewer's own /api routes (and none at all in an exported file, which embeds its data).
(function () {
  'use strict';

  const EMBED = JSON.parse(document.getElementById('plguard-data').textContent);
  const STATIC = EMBED !== null;
  const FILTERS = [
    ['method', 'method'], ['type', 'XSTest type'], ['label', 'label'], ['action', 'action'],
    ['evaluator_verdict', 'evaluator verdict'], ['disagree', 'evaluator vs guard'],
  ];
  const NONE = '__none__';
  const ROW_CAP = 1000;
  const cache = {};
  let lastKeys = [];  // the filtered table order, for previous/next on the record page
  let lastTable = '#/';  // the table with its filters, for the way back from a record

  // -- data access: the live server's routes, or the embedded export ----------------------
  function getJSON(url) {
    return fetch(url, { headers: { Accept: 'application/json' } }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) { throw new Error(body && body.error ? body.error : r.status + ' ' + r.statusText); }
        return body;
      });
    });
  }
  function postJSON(url, payload) {
    return fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                        body: JSON.stringify(payload) }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) { throw new Error(body && body.error ? body.error : r.status + ' ' + r.statusText); }
        return body;
      });
    });
  }
  function once(name, fn) {
    if (!cache[name]) { cache[name] = fn().catch(function (e) { delete cache[name]; throw e; }); }
    return cache[name];
  }
  const api = {
    run: function () { return once('run', function () { return STATIC ? Promise.resolve(EMBED.run) : getJSON('/api/run'); }); },
    rows: function () { return once('rows', function () { return STATIC ? Promise.resolve(EMBED.rows) : getJSON('/api/records'); }); },
    report: function () { return once('report', function () { return STATIC ? Promise.resolve(EMBED.report) : getJSON('/api/report'); }); },
    record: function (key) {
      if (STATIC) {
        const r = EMBED.records[key];
        return r ? Promise.resolve(r) : Promise.reject(new Error('no record ' + key + ' in this export'));
      }
      return getJSON('/api/record?key=' + encodeURIComponent(key));
    },
    whatif: function (key, probs) { return postJSON('/api/whatif', { key: key, probs: probs }); },
  };

  // -- DOM helpers: text goes in as text, never as markup ------------------------------------
  function h(tag, attrs) {
    const el = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        const v = attrs[k];
        if (v === null || v === undefined || v === false) { return; }
        if (k === 'text') { el.textContent = v; } else if (k === 'class') { el.className = v; } else if (k === 'on') {
          Object.keys(v).forEach(function (ev) { el.addEventListener(ev, v[ev]); });
        } else { el.setAttribute(k, v === true ? '' : v); }
      });
    }
    for (let i = 2; i < arguments.length; i++) { add(el, arguments[i]); }
    return el;
  }
  function add(el, child) {
    if (child === null || child === undefined || child === false) { return; }
    if (Array.isArray(child)) { child.forEach(function (c) { add(el, c); }); return; }
    el.appendChild(typeof child === 'string' || typeof child === 'number' ? document.createTextNode(String(child)) : child);
  }
  function fmt(p, digits) {
    return (typeof p === 'number' && isFinite(p)) ? p.toFixed(digits === undefined ? 3 : digits) : '—';
  }
  // A null over-refusal threshold is off (a calibration found no threshold worth rewriting at).
  function overTh(th) { return th.over_refusal === null ? 'over-refusal off' : 'over-refusal ≥ ' + fmt(th.over_refusal, 2); }
  function show(v) { return v === null || v === undefined || v === '' ? '—' : String(v); }
  function badge(v, cls) {
    return h('span', { class: 'badge ' + (cls || ('b-' + v)) }, show(v));
  }
  function disagreeText(v) { return v === true ? 'disagree' : v === false ? 'agree' : 'n/a'; }
  function pre(text, testid) {
    return h('pre', { class: 'text', 'data-testid': testid }, text === null || text === undefined ? '—' : text);
  }
  function card(title) {
    const c = h('section', { class: 'card' }, title ? h('h3', { text: title }) : null);
    for (let i = 1; i < arguments.length; i++) { add(c, arguments[i]); }
    return c;
  }
  function setMain(node) {
    const main = document.getElementById('main');
    main.replaceChildren(node);
    window.scrollTo(0, 0);
  }
  function fail(err) {
    setMain(h('div', { class: 'card', 'data-testid': 'error' }, h('h3', { text: 'Could not load this page' }),
      h('p', { text: String(err && err.message ? err.message : err) })));
  }
  function navActive(which) {
    document.getElementById('nav-records').classList.toggle('active', which === 'records');
    document.getElementById('nav-summary').classList.toggle('active', which === 'summary');
  }
  function bar(p, kind, threshold) {
    const b = h('div', { class: 'bar ' + (kind || '') },
      h('div', { class: 'fill', style: 'width:' + (Math.max(0, Math.min(1, p || 0)) * 100).toFixed(2) + '%' }));
    if (typeof threshold === 'number') {
      b.appendChild(h('div', { class: 'mark', title: 'threshold ' + fmt(threshold, 2),
                               style: 'left:calc(' + (threshold * 100).toFixed(2) + '% - 1px)' }));
    }
    return b;
  }

  // -- header and problems banner ----------------------------------------------------------
  function renderChrome(run) {
    document.getElementById('source').textContent = run.title + ' · ' + run.source;
    document.getElementById('mode').textContent = STATIC ? 'static export (no what-if)' : '';
    document.title = run.title + ' · plguard view';
    const reload = document.getElementById('reload');
    reload.hidden = STATIC;
    reload.onclick = function () {
      postJSON('/api/reload', {}).then(function () {
        Object.keys(cache).forEach(function (k) { delete cache[k]; });
        start();
      }).catch(fail);
    };
    const box = document.getElementById('problems');
    box.replaceChildren();
    if (run.problems.length) {
      const list = h('ul');
      run.problems.forEach(function (p) {
        list.appendChild(h('li', null, p.where ? h('code', { text: p.where }) : null, p.where ? ': ' : '', p.message));
      });
      box.appendChild(h('strong', { text: run.problems.length + (run.problems.length === 1 ? ' problem' : ' problems') +
        ' reading ' + run.source + ' (everything readable is shown):' }));
      box.appendChild(list);
    }
  }

  // -- the records table --------------------------------------------------------------------
  function parseQuery(hash) {
    const q = {};
    const i = hash.indexOf('?');
    if (i >= 0) { new URLSearchParams(hash.slice(i + 1)).forEach(function (v, k) { q[k] = v; }); }
    return q;
  }
  function optionValue(f, v) {
    if (v === null || v === undefined) { return NONE; }
    if (f === 'disagree') { return v ? 'yes' : 'no'; }
    return String(v);
  }
  function optionLabel(f, v) {
    if (f === 'disagree') { return v === true ? 'disagree' : v === false ? 'agree' : 'n/a (no verdict pair)'; }
    return v === null || v === undefined ? '(none)' : String(v);
  }
  function matches(row, q) {
    for (let i = 0; i < FILTERS.length; i++) {
      const f = FILTERS[i][0];
      if (q[f] && optionValue(f, row[f]) !== q[f]) { return false; }
    }
    if (q.q) {
      const needle = q.q.toLowerCase();
      const hay = [row.id, row.prompt, row.response].join(' ').toLowerCase();
      if (hay.indexOf(needle) < 0) { return false; }
    }
    return true;
  }
  function showTable(q) {
    navActive('records');
    Promise.all([api.run(), api.rows()]).then(function (res) {
      const run = res[0];
      const rows = res[1];
      const filters = h('div', { class: 'filters' });
      FILTERS.forEach(function (pair) {
        const f = pair[0];
        const sel = h('select', { id: 'filter-' + f, 'data-filter': f, 'data-testid': 'filter-' + f },
          h('option', { value: '' }, 'all'));
        (run.filters[f] || []).forEach(function (v) {
          sel.appendChild(h('option', { value: optionValue(f, v) }, optionLabel(f, v)));
        });
        sel.value = q[f] || '';
        sel.addEventListener('change', function () { q[f] = sel.value; update(); });
        filters.appendChild(h('label', null, pair[1], sel));
      });
      const search = h('input', { type: 'search', id: 'filter-q', placeholder: 'id or text', 'data-testid': 'filter-q', value: q.q || '' });
      search.addEventListener('input', function () { q.q = search.value; update(); });
      filters.appendChild(h('label', null, 'search', search));
      const count = h('span', { id: 'count', 'data-testid': 'count', class: 'muted' });
      const tbody = h('tbody');
      const table = h('table', { class: 'records', 'data-testid': 'records' },
        h('thead', null, h('tr', null, ['id', 'method', 'type', 'label', 'action', 'evaluator', 'guard',
          'evaluator vs guard', 'prompt', 'final answer'].map(function (c) { return h('th', { text: c }); }))),
        tbody);
      const note = h('p', { class: 'muted' });
      function update() {
        const params = new URLSearchParams();
        Object.keys(q).forEach(function (k) { if (q[k]) { params.set(k, q[k]); } });
        const hash = '#/' + (params.toString() ? '?' + params.toString() : '');
        if (location.hash !== hash) { history.replaceState(null, '', hash); }
        lastTable = hash;
        const shown = rows.filter(function (r) { return matches(r, q); });
        lastKeys = shown.map(function (r) { return r.key; });
        count.textContent = shown.length + ' of ' + rows.length + ' records';
        tbody.replaceChildren();
        shown.slice(0, ROW_CAP).forEach(function (r) {
          const link = h('a', { href: '#/record/' + encodeURIComponent(r.key), text: show(r.id) });
          tbody.appendChild(h('tr', { 'data-key': r.key, on: { click: function (ev) {
            if (ev.target.tagName !== 'A') { location.hash = '#/record/' + encodeURIComponent(r.key); }
          } } },
          h('td', null, link, r.error ? badge('error') : null, r.issues ? h('span', { class: 'muted', title: r.issues + ' problem(s) reading this record', text: ' ⚠' }) : null),
          h('td', { text: show(r.method) }), h('td', { text: show(r.type) }),
          h('td', null, r.label ? badge(r.label, r.label === 'unsafe' ? 'b-unsafe' : 'b-safe') : '—'),
          h('td', null, r.action ? badge(r.action) : '—'),
          h('td', null, r.evaluator_verdict ? badge(r.evaluator_verdict) : '—'),
          h('td', null, r.guard_verdict ? badge(r.guard_verdict) : '—'),
          h('td', null, r.disagree === true ? badge('disagree', 'b-disagree') : r.disagree === false ? 'agree' : '—'),
          h('td', { class: 'excerpt', title: show(r.prompt), text: show(r.prompt) }), h('td', { class: 'excerpt', title: show(r.response), text: show(r.response) })));
        });
        note.textContent = shown.length > ROW_CAP ? 'Showing the first ' + ROW_CAP + '; narrow the filters to see the rest.' : '';
      }
      setMain(h('div', null, h('h2', { text: run.title }), filters, h('p', null, count), h('div', { class: 'card' }, table), note));
      update();
    }).catch(fail);
  }

  // -- the record page ----------------------------------------------------------------------
  function explanation(policy, rule, kind, p, threshold, testid) {
    const info = policy && policy.rules ? policy.rules[rule] : null;
    return h('div', { class: 'explain ' + kind, 'data-testid': testid },
      h('div', null, h('strong', { text: info ? info.title : rule }), ' ',
        h('span', { class: 'name muted', text: rule }), ' = ' + fmt(p) +
        (typeof threshold === 'number' ? (p >= threshold ? ' ≥ ' : ' < ') + 'threshold ' + fmt(threshold, 2) : '')),
      h('div', { text: info ? info.text : 'No explanation: the policy could not be loaded.' }));
  }
  function ruleKind(policy, rule) {
    // The decision compares rule-level maxima only; aggregates are shown but not thresholded.
    if (policy && policy.unsafe_rules.length) {
      if (policy.unsafe_rules.indexOf(rule) >= 0) { return 'unsafe'; }
      if (policy.over_refusal_rules.indexOf(rule) >= 0) { return 'over_refusal'; }
      return 'aggregate';
    }
    if (rule.indexOf('unsafe_compliance_') === 0) { return 'unsafe'; }
    if (rule.indexOf('over_refusal_') === 0) { return 'over_refusal'; }
    return 'aggregate';
  }
  function predicateBars(preds, policy) {
    const box = h('div', { class: 'bars', 'data-testid': 'predicates' });
    preds.forEach(function (p) {
      const info = policy && policy.predicates ? policy.predicates[p.name] : null;
      const b = bar(p.p);
      const vs = p.variants || [];
      let spread = '';
      if (vs.length > 1) {
        // Paraphrases of the question that disagree: show their range on the bar.
        const lo = Math.min.apply(null, vs);
        const hi = Math.max.apply(null, vs);
        b.appendChild(h('div', { class: 'range', style: 'left:' + (lo * 100).toFixed(2) + '%;width:' + ((hi - lo) * 100).toFixed(2) + '%' }));
        spread = ' · paraphrases ' + vs.map(function (v) { return fmt(v); }).join(', ');
      }
      box.appendChild(h('div', { class: 'row', 'data-testid': 'pred-' + p.name, title: (info ? info.description || info.question : '') + spread },
        h('span', { class: 'name', text: p.name + (p.truncated ? ' (input truncated)' : '') }),
        b, h('span', { text: fmt(p.p) + (vs.length > 1 ? ' ±' + fmt((Math.max.apply(null, vs) - Math.min.apply(null, vs)) / 2, 2) : '') })));
    });
    if (!preds.length) { box.appendChild(h('p', { class: 'muted', text: 'No predicate probabilities in this record.' })); }
    return box;
  }
  function rulesTable(rec, policy, th) {
    const su = rec.strongest_unsafe ? rec.strongest_unsafe[0] : null;
    const so = rec.strongest_over_refusal ? rec.strongest_over_refusal[0] : null;
    const tbody = h('tbody');
    const names = Object.keys(rec.rules);
    names.forEach(function (r) {
      const kind = ruleKind(policy, r);
      const t = kind === 'unsafe' ? th.unsafe : kind === 'over_refusal' ? th.over_refusal : null;
      const info = policy && policy.rules ? policy.rules[r] : null;
      tbody.appendChild(h('tr', { 'data-rule': r, class: r === su ? 'strongest-unsafe' : r === so ? 'strongest-over' : null },
        h('td', { class: 'name', title: info ? info.text : '', text: r + (r === su ? ' ◀ strongest unsafe' : r === so ? ' ◀ strongest over-refusal' : kind === 'aggregate' ? ' (aggregate: not used by the decision)' : '') }),
        h('td', { style: 'width:30%' }, bar(rec.rules[r], kind, t)),
        h('td', { 'data-testid': 'rule-' + r, text: fmt(rec.rules[r]) }),
        h('td', { class: 'wi', 'data-testid': 'wi-' + r, text: '' })));
    });
    return h('table', { 'data-testid': 'rules' },
      h('thead', null, h('tr', null, h('th', { text: 'rule' }), h('th', { text: 'recorded' }), h('th', { text: 'p' }),
        h('th', { text: STATIC ? '' : 'what-if' }))), tbody);
  }
  function repairsCard(rec) {
    if (!rec.repairs || !rec.repairs.length) { return null; }
    return card('Repair rounds (' + rec.repairs.length + ')', rec.repairs.map(function (r) {
      const d = r.decision || {};
      return h('div', { class: 'card', 'data-testid': 'repair-' + r.round },
        h('div', null, h('strong', { text: 'Round ' + show(r.round) }), ' repairing a ', badge(r.action),
          ' decision → re-check: ', d.action ? badge(d.action) : '—'),
        d.reason ? h('p', { class: 'muted', text: d.reason }) : null,
        r.prompt ? h('details', null, h('summary', { text: 'repair prompt' }), pre(r.prompt)) : null,
        r.response !== null && r.response !== undefined ? pre(r.response) : h('p', { class: 'muted', text: 'The repaired text is not stored in this record format.' }),
        r.predicates && r.predicates.length ? h('details', null, h('summary', { text: 're-check predicates' }), predicateBars(r.predicates, null)) : null);
    }));
  }
  function timingsCard(rec) {
    const rows = [];
    [['times', rec.timings], ['guard trace', rec.trace_timings]].forEach(function (pair) {
      Object.keys(pair[1] || {}).forEach(function (k) { rows.push(h('tr', null, h('td', { text: pair[0] }), h('td', { text: k }), h('td', { text: fmt(pair[1][k], 3) + ' s' }))); });
    });
    if (!rows.length) { return null; }
    return card('Timings', h('table', { class: 'kv', 'data-testid': 'timings' }, h('tbody', null, rows)));
  }
  function verdictCard(rec) {
    const parts = [];
    if (rec.evaluator) {
      const e = rec.evaluator;
      const readable = e.parsed && !e.error;
      parts.push(h('p', null, 'Semantic evaluator: ', badge(rec.evaluator_verdict), e.class ? h('code', { text: ' ' + e.class }) : null,
        readable && e.rationale ? h('span', { class: 'muted', text: ' — ' + e.rationale }) : null,
        e.error ? h('span', { class: 'muted', text: ' — ' + e.error }) : null,
        !readable && !e.error ? h('span', { class: 'muted', text: ' — its reply could not be read as a verdict' }) : null));
      if (e.raw) { parts.push(h('details', null, h('summary', { text: 'evaluator reply' }), pre(e.raw))); }
    }
    if (rec.guard_verdict) {
      parts.push(h('p', null, 'Guard on the final answer: ', badge(rec.guard_verdict), ' → ',
        rec.disagree === true ? badge('evaluator disagrees', 'b-disagree') : rec.disagree === false ? 'evaluator agrees' : 'no comparison'));
    }
    if (rec.judge) {
      parts.push(h('p', null, 'In-loop judge: ', badge(rec.judge.verdict), rec.judge.rationale ? ' ' + rec.judge.rationale : '',
        rec.judge.parsed === false ? h('span', { class: 'muted', text: ' (verdict unreadable: draft kept)' }) : null));
    }
    if (rec.regex || rec.regex_extended) {
      const stored = rec.regex_stored ? ' (recomputed with the current patterns, as the report does; at run time: ' +
        Object.keys(rec.regex_stored).map(function (k) { return k + ' ' + rec.regex_stored[k]; }).join(', ') + ')' : '';
      parts.push(h('p', { class: 'muted', text: 'String match: ' + show(rec.regex) + ' · extended: ' + show(rec.regex_extended) + stored }));
    }
    return parts.length ? card('Verdicts', parts) : null;
  }

  function whatIfPanel(rec, policy, onResult) {
    if (STATIC) {
      return card('What if', h('p', { class: 'muted', text: 'This is a static export: the what-if panel needs the live viewer (plguard view RUN_DIR).' }));
    }
    if (!rec.whatif.available) {
      return card('What if', h('p', { class: 'muted', text: 'Not available: ' + rec.whatif.why_not + '.' }));
    }
    const recorded = {};
    rec.predicates.forEach(function (p) { recorded[p.name] = p.p; });
    const current = Object.assign({}, recorded);
    const th = rec.thresholds_used;
    const action = h('span', { 'data-testid': 'whatif-action' });
    const reason = h('p', { class: 'muted', 'data-testid': 'whatif-reason' });
    const flip = h('div', { class: 'flip', 'data-testid': 'whatif-flip' });
    const flips = h('tbody');
    const status = h('span', { class: 'muted', 'data-testid': 'whatif-status' });
    const sliders = {};
    let seq = 0;
    let timer = null;
    function request() {
      const mine = ++seq;
      status.textContent = 'evaluating…';
      api.whatif(rec.key, current).then(function (res) {
        if (mine !== seq) { return; }  // a later slider move has already been sent
        status.textContent = '';
        action.replaceChildren(badge(res.decision.action));
        action.setAttribute('data-action', res.decision.action);
        reason.textContent = res.decision.reason;
        renderFlip(res);
        onResult(res);
      }).catch(function (e) { if (mine === seq) { status.textContent = 'error: ' + e.message; } });
    }
    function schedule() { clearTimeout(timer); timer = setTimeout(request, 40); }
    function setValue(name, v) {
      current[name] = v;
      sliders[name].input.value = String(v);
      sliders[name].out.textContent = fmt(v);
      sliders[name].row.classList.toggle('changed', Math.abs(v - recorded[name]) > 1e-12);
    }
    function renderFlip(res) {
      const f = res.smallest_flip;
      flip.replaceChildren();
      if (!f) {
        flip.appendChild(h('span', { text: 'No single predicate change flips this decision: every predicate alone, anywhere in [0, 1], leaves it at ' + res.decision.action + '.' }));
      } else {
        // A decision sitting exactly on a threshold flips with a change too small for 4 digits.
        const tiny = Math.abs(f.delta) < 5e-5;
        const delta = tiny ? f.delta.toExponential(1) + ': the decision sits on a threshold' : (f.delta > 0 ? '+' : '') + fmt(f.delta, 4);
        flip.appendChild(h('span', null, 'Smallest single change that flips the decision: set ', h('strong', { class: 'name', text: f.predicate }),
          ' from ' + fmt(f.old, tiny ? 6 : 4) + ' to ' + fmt(f.new, tiny ? 6 : 4) + ' (', h('span', { class: f.delta > 0 ? 'delta-up' : 'delta-down', text: delta }),
          ') → ', badge(f.action), f.exact ? '' : ' (approximate)', ' '));
        flip.appendChild(h('button', { type: 'button', 'data-testid': 'whatif-apply', text: 'apply', on: { click: function () { setValue(f.predicate, f.new); request(); } } }));
      }
      flips.replaceChildren();
      res.flips.forEach(function (x) {
        flips.appendChild(h('tr', null, h('td', { class: 'name', text: x.predicate }), h('td', { text: fmt(x.old, 4) + ' → ' + fmt(x.new, 4) }),
          h('td', { text: (x.delta > 0 ? '+' : '') + fmt(x.delta, 4) }), h('td', null, badge(x.action))));
      });
    }
    const rows = h('div');
    policy.predicate_names.forEach(function (name) {
      const info = policy.predicates[name] || {};
      const input = h('input', { type: 'range', min: '0', max: '1', step: 'any', value: String(recorded[name]),
        id: 'slider-' + name, 'data-testid': 'slider-' + name, 'aria-label': name });
      const out = h('span', { text: fmt(recorded[name]) });
      const row = h('div', { class: 'slider', title: info.description || info.question || '' },
        h('label', { class: 'name', for: 'slider-' + name, text: name }), input, out);
      sliders[name] = { input: input, out: out, row: row };
      input.addEventListener('input', function () { setValue(name, parseFloat(input.value)); schedule(); });
      rows.appendChild(row);
    });
    const reset = h('button', { type: 'button', 'data-testid': 'whatif-reset', text: 'reset to recorded', on: { click: function () {
      Object.keys(recorded).forEach(function (n) { setValue(n, recorded[n]); });
      request();
    } } });
    request();
    return h('section', { class: 'card whatif', 'data-testid': 'whatif' }, h('h3', { text: 'What if' }),
      h('p', { class: 'muted', text: 'Move a predicate probability: the server re-evaluates the compiled policy (the same circuit and decision function as the guard) with thresholds unsafe ≥ ' +
        fmt(th.unsafe, 2) + ', ' + overTh(th) + ' (from ' + th.source + ').' }),
      h('div', { class: 'decision' }, 'Decision: ', action, ' ', status), reason, flip,
      h('details', null, h('summary', { text: 'nearest flip for every predicate' }),
        h('table', null, h('thead', null, h('tr', null, h('th', { text: 'predicate' }), h('th', { text: 'change' }), h('th', { text: 'delta' }), h('th', { text: 'decision' }))), flips)),
      rows, h('p', null, reset));
  }

  function showRecord(key) {
    navActive('records');
    Promise.all([api.run(), api.record(key)]).then(function (res) {
      const run = res[0];
      const rec = res[1];
      const policy = rec.policy || (rec.policy_ref && run.policies ? run.policies[rec.policy_ref] : null) || null;
      const th = rec.thresholds_used;
      const idx = lastKeys.indexOf(key);
      const navs = h('p', null, h('a', { href: lastTable, 'data-testid': 'back', text: '← records' }),
        idx > 0 ? h('a', { href: '#/record/' + encodeURIComponent(lastKeys[idx - 1]), style: 'margin-left:12px', text: '‹ previous' }) : null,
        idx >= 0 && idx + 1 < lastKeys.length ? h('a', { href: '#/record/' + encodeURIComponent(lastKeys[idx + 1]), style: 'margin-left:12px', text: 'next ›' }) : null);
      const head = h('div', null, h('h2', { 'data-testid': 'record-title', text: show(rec.method) + ' / ' + show(rec.id) }),
        h('p', null, rec.type ? badge(rec.type, 'b-type') : null, rec.label ? badge(rec.label, rec.label === 'unsafe' ? 'b-unsafe' : 'b-safe') : null,
          rec.action ? h('span', null, 'action ', badge(rec.action)) : null,
          rec.repaired ? badge('repaired', 'b-type') : null, rec.fallback_used ? badge('fallback refusal', 'b-refuse') : null,
          h('span', { class: 'muted', text: ' ' + rec.source })));
      const issues = rec.issues && rec.issues.length ? h('div', { class: 'card', style: 'background:#fff8e6' },
        h('strong', { text: 'Reading this record:' }), h('ul', null, rec.issues.map(function (i) { return h('li', { text: i }); }))) : null;
      const left = h('div', null,
        card('Prompt', pre(rec.prompt, 'prompt')),
        rec.draft !== null && rec.draft !== undefined ? card('Draft', pre(rec.draft, 'draft')) : null,
        card('Final answer', pre(rec.response, 'final')),
        rec.error ? card('Error', pre(rec.error, 'record-error')) : null,
        repairsCard(rec), verdictCard(rec), timingsCard(rec));
      const right = h('div');
      if (rec.action || Object.keys(rec.rules).length) {
        const su = rec.strongest_unsafe;
        const so = rec.strongest_over_refusal;
        const replay = rec.replay;
        right.appendChild(card('Decision',
          h('div', { class: 'decision' }, 'Action ', rec.action ? badge(rec.action) : '—',
            h('span', { class: 'muted', text: ' thresholds: unsafe ≥ ' + fmt(th.unsafe, 2) + ', ' + overTh(th) + ' (' + th.source + ')' })),
          rec.reason ? h('p', { 'data-testid': 'reason', text: rec.reason }) : null,
          su && su[0] ? explanation(policy, su[0], 'unsafe', su[1], th.unsafe, 'explain-unsafe') : null,
          so && so[0] ? explanation(policy, so[0], 'over_refusal', so[1], th.over_refusal, 'explain-over') : null,
          replay ? h('p', { class: 'muted', 'data-testid': 'replay', text: 'Replay: the recorded predicates through ' + (policy ? policy.id : 'the policy') + ' give ' + replay.action +
            (replay.matches_action ? ' (same decision' : ' (a DIFFERENT decision') + (replay.max_rule_diff !== null ? ', largest rule difference ' + replay.max_rule_diff.toExponential(1) + ')' : ')') }) : null));
        right.appendChild(card('Predicate probabilities', predicateBars(rec.predicates, policy)));
        right.appendChild(card('Rule probabilities', rulesTable(rec, policy, th),
          policy && Object.keys(policy.rules).length ? h('details', null, h('summary', { text: 'every rule in structured English' }),
            h('ul', null, Object.keys(policy.rules).map(function (r) {
              const info = policy.rules[r];
              return h('li', null, h('span', { text: info.text }), info.queried ? null : h('span', { class: 'muted', text: ' (helper)' }));
            }))) : null));
        if (rec.predicates.length || rec.whatif) {
          // Beside the rule table rather than under it, so both are in view while sliding.
          left.appendChild(whatIfPanel(rec, policy || { predicate_names: [], predicates: {} }, function (res) {
            Object.keys(res.rules).forEach(function (r) {
              const cell = document.querySelector('[data-testid="wi-' + CSS.escape(r) + '"]');
              if (!cell) { return; }
              const d = res.rules[r] - (rec.rules[r] === undefined ? res.rules[r] : rec.rules[r]);
              cell.textContent = fmt(res.rules[r]) + (Math.abs(d) > 5e-4 ? ' (' + (d > 0 ? '+' : '') + fmt(d) + ')' : '');
              cell.className = 'wi ' + (d > 5e-4 ? 'delta-up' : d < -5e-4 ? 'delta-down' : '');
              const row = cell.parentNode;
              row.classList.toggle('wi-strongest', r === res.decision.strongest_unsafe[0] || r === res.decision.strongest_over_refusal[0]);
            });
          }));
        }
      } else {
        right.appendChild(card('Guard', h('p', { class: 'muted', text: 'This method has no guard decision (' + show(rec.method) + ').' })));
      }
      setMain(h('div', { 'data-testid': 'record' }, navs, head, issues, h('div', { class: 'grid' }, left, right)));
    }).catch(fail);
  }

  // -- the run summary ----------------------------------------------------------------------
  function kv(obj) {
    const body = h('tbody');
    Object.keys(obj).forEach(function (k) {
      const v = obj[k];
      if (v === null || v === undefined) { return; }
      body.appendChild(h('tr', null, h('td', { text: k }), h('td', { text: typeof v === 'object' ? JSON.stringify(v) : String(v) })));
    });
    return h('table', { class: 'kv' }, body);
  }
  function showSummary() {
    navActive('summary');
    Promise.all([api.run(), api.report()]).then(function (res) {
      const run = res[0];
      const rep = res[1];
      const m = run.manifest;
      const parts = [h('h2', { text: run.title + ': summary' })];
      if (m) {
        parts.push(card('Run', kv({
          source: run.source, benchmark: m.benchmark, policy: m.policy ? m.policy.id || m.policy.name : null,
          generator: m.generator ? [m.generator.model_id || m.generator.path, m.generator.sha256 ? 'sha256 ' + String(m.generator.sha256).slice(0, 12) : null].filter(Boolean).join(' · ') : null,
          thresholds: m.thresholds, methods: m.methods ? m.methods.join(', ') : null, scorers: m.scorers ? m.scorers.join(', ') : null,
          prompts: m.n_prompts, generation: m.generation, repair: m.repair, started: m.started, ended: m.ended, sessions: m.sessions,
          commit: m.git && m.git.commit ? String(m.git.commit).slice(0, 12) + (m.git.dirty ? ' (dirty tree)' : '') : null,
        })));
      } else {
        parts.push(card('Source', kv({ source: run.source, kind: run.kind, records: run.n_records })));
      }
      const counts = h('tbody');
      run.counts.forEach(function (c) {
        function dist(d) { return Object.keys(d).map(function (k) { return k + ' ' + d[k]; }).join(', ') || '—'; }
        counts.appendChild(h('tr', null, h('td', { text: c.method }), h('td', { text: String(c.records) }), h('td', { text: String(c.errors) }),
          h('td', { text: dist(c.actions) }), h('td', { text: dist(c.evaluator) }), h('td', { text: String(c.disagree) })));
      });
      parts.push(card('Records (counted from the records; the report below has the metrics with intervals)',
        h('table', { 'data-testid': 'counts' }, h('thead', null, h('tr', null, ['method', 'records', 'errors', 'actions', 'evaluator verdicts', 'evaluator disagrees with guard'].map(function (t) { return h('th', { text: t }); }))), counts)));
      if (rep.documents.length) {
        rep.documents.forEach(function (d) {
          const sec = h('section', { class: 'card report', id: 'report-' + d.name, 'data-testid': 'report-doc' }, h('h3', { class: 'muted', text: d.name }));
          const body = h('div');
          body.innerHTML = d.html;  // rendered server-side from escaped Markdown
          sec.appendChild(body);
          parts.push(sec);
        });
      }
      if (rep.plots.length) {
        parts.push(card('Plots', rep.plots.map(function (p) {
          return h('figure', { 'data-testid': 'plot' }, h('img', { src: p.src, alt: p.name }), h('figcaption', { class: 'muted', text: p.name }));
        })));
      }
      if (!rep.documents.length && !rep.plots.length) {
        parts.push(card('Report', h('p', { class: 'muted', text: run.kind === 'run' ? 'No report in this folder yet: `plguard report ' + run.source + '` writes the tables and plots.' : 'Trace files have no report.' })));
      }
      setMain(h('div', { 'data-testid': 'summary' }, parts));
    }).catch(fail);
  }

  // -- routing ------------------------------------------------------------------------------
  function route() {
    const hash = location.hash || '#/';
    if (hash.indexOf('#/record/') === 0) { showRecord(decodeURIComponent(hash.slice(9))); } else if (hash.indexOf('#/summary') === 0) { showSummary(); } else { showTable(parseQuery(hash)); }
  }
  function start() {
    api.run().then(function (run) { renderChrome(run); route(); }).catch(fail);
  }
  window.addEventListener('hashchange', route);
  start();
}());
