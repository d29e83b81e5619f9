// macprof board: builds the table from the page's own JSON (#board-data), sorts and filters it.
// Every string goes into the page as text (textContent), never as HTML: it came from a run log.
// The view (filters, sort) is kept in the address's #fragment, so a link opens the same view:
// #phase=warm&chip=Apple%20M4%20Max&sort=decode_tok_s:desc. #click=a,b clicks those columns'
// titles in turn once the table is built (what a reader's clicks do; the page's tests use it).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("board-data").textContent);
  var columns = data.columns;
  var FACETS = [["phase", "Phase"], ["chip", "Chip"], ["model", "Model"], ["quant", "Quantization"], ["engine", "Engine"]];
  var ALL = "";
  var state = { filters: {}, sort: null, desc: true };
  var table = document.getElementById("board");
  var form = document.getElementById("filters");

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function values(facet) {
    var seen = {};
    data.groups.forEach(function (g) { g.facets[facet].forEach(function (v) { seen[v] = true; }); });
    return Object.keys(seen).sort();
  }

  function buildFilters(params) {
    FACETS.forEach(function (f) {
      var name = f[0], label = el("label", null, f[1]), select = el("select");
      select.name = name;
      select.appendChild(el("option", null, "all")).value = ALL;
      var options = values(name);
      options.forEach(function (v) { select.appendChild(el("option", null, v)).value = v; });
      var wanted = params.get(name);
      if (wanted === null && name === "phase" && options.indexOf("warm") >= 0) wanted = "warm";
      select.value = wanted !== null && options.indexOf(wanted) >= 0 ? wanted : ALL;
      state.filters[name] = select.value;
      select.addEventListener("change", function () { state.filters[name] = select.value; render(); });
      label.appendChild(select);
      form.appendChild(label);
    });
  }

  function buildHead() {
    var row = el("tr");
    columns.forEach(function (c) {
      var th = el("th", c.numeric ? "num" : null);
      th.dataset.col = c.id;
      th.title = c.tip;
      var button = el("button", null, c.title);
      button.type = "button";
      button.addEventListener("click", function () { sortBy(c.id); });
      th.appendChild(button);
      row.appendChild(th);
    });
    table.tHead.appendChild(row);
  }

  function sortBy(id) {
    var col = columns.filter(function (c) { return c.id === id; })[0];
    if (!col) return;
    // the first click on a figure puts the largest first, on a name A to Z; the next turns it round
    state.desc = state.sort === id ? !state.desc : col.numeric;
    state.sort = id;
    render();
  }

  function compare(a, b, index) {
    var x = a.cells[index][2], y = b.cells[index][2];
    var xn = x === null || x === undefined || x === "", yn = y === null || y === undefined || y === "";
    if (xn || yn) return xn === yn ? 0 : (xn ? 1 : -1);  // unknown last, whichever way
    var r = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
    return state.desc ? -r : r;
  }

  function visibleGroups() {
    var shown = data.groups.filter(function (g) {
      return FACETS.every(function (f) {
        var want = state.filters[f[0]];
        return want === ALL || g.facets[f[0]].indexOf(want) >= 0;
      });
    });
    if (state.sort) {
      var index = columns.map(function (c) { return c.id; }).indexOf(state.sort);
      shown = shown.map(function (g, i) { return [g, i]; })
        .sort(function (a, b) { return compare(a[0], b[0], index) || a[1] - b[1]; })
        .map(function (p) { return p[0]; });
    }
    return shown;
  }

  function badge(mark) {
    var kind = mark === "unverified" || mark === "failed" ? "bad" : (mark === "incomplete run" || mark === "not verified" ? "info" : "");
    return el("span", "badge" + (kind ? " " + kind : ""), mark);
  }

  function render() {
    var shown = visibleGroups();
    // a figure no shown row has (accuracy without tasks) takes no column
    var empty = columns.map(function (c, i) {
      return c.numeric && shown.every(function (g) { return g.cells[i][0] === ""; });
    });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      th.hidden = empty[i];
      if (columns[i].id === state.sort) th.setAttribute("aria-sort", state.desc ? "descending" : "ascending");
      else th.removeAttribute("aria-sort");
    });
    var body = el("tbody");
    shown.forEach(function (g) {
      var tr = el("tr");
      tr.dataset.group = String(data.groups.indexOf(g));
      if (g.marks.length) tr.classList.add("marked");
      if (g.marks.indexOf("unverified") >= 0) tr.classList.add("unverified");
      columns.forEach(function (c, i) {
        if (empty[i]) return;
        var td = el("td", c.numeric ? "num" : null);
        td.dataset.col = c.id;
        if (c.id === "marks") {
          g.marks.forEach(function (m) { td.appendChild(badge(m)); });
        } else {
          td.appendChild(el("div", "main", g.cells[i][0]));
          if (g.cells[i][1]) g.cells[i][1].split("\n").forEach(function (line) { td.appendChild(el("div", "sub", line)); });
          if (g.cells[i][3]) td.title = g.cells[i][3];
        }
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    table.replaceChild(body, table.tBodies[0]);
    document.getElementById("empty").hidden = shown.length > 0;
    var runs = shown.reduce(function (n, g) { return n + g.runs.length; }, 0);
    document.getElementById("counts").textContent = shown.length + " of " + data.groups.length + " rows (" + runs +
      " of " + data.rows + " results), " + data.logs + " runs";
    keepInAddress();
  }

  function keepInAddress() {
    var p = new URLSearchParams();
    FACETS.forEach(function (f) { if (state.filters[f[0]] !== ALL) p.set(f[0], state.filters[f[0]]); });
    if (state.sort) p.set("sort", state.sort + ":" + (state.desc ? "desc" : "asc"));
    try { history.replaceState(null, "", "#" + p.toString()); } catch (e) { /* a sandboxed frame: no address */ }
  }

  var params = new URLSearchParams(location.hash.slice(1));
  buildFilters(params);
  buildHead();
  var sort = (params.get("sort") || "").split(":");
  if (sort[0]) { state.sort = sort[0]; state.desc = sort[1] !== "asc"; }
  render();
  (params.get("click") || "").split(",").forEach(function (id) {
    var th = id && table.tHead.querySelector('th[data-col="' + (window.CSS && CSS.escape ? CSS.escape(id) : id) + '"] button');
    if (th) th.click();
  });
})();
