/* Feature dashboard pages (index, dim, compare). Plain JS, no external assets.
 * Reads the global written by data.js (see solo_bayesncl/dashboard/builder.py for its layout). */
(function () {
  "use strict";

  var THUMB_CARD = 36;
  var THUMB_PAGE = 64;
  var EAGER_CARDS = 300; /* up to this many cards, all thumbnails are drawn at once */
  var PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#bab0ac"];
  var LIGHT = [3, 5, 7, 9]; /* palette entries that need dark text */

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function pct(x) {
    if (x === null || x === undefined) return "–";
    var p = 100 * x;
    return (p >= 10 || p === 0 ? p.toFixed(0) : p.toFixed(1)) + "%";
  }
  function num(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    var a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1000) return v.toFixed(0);
    if (a >= 0.01) return v.toPrecision(3);
    return v.toExponential(1);
  }
  function classColor(c) {
    if (c < PALETTE.length) return PALETTE[c];
    return "hsl(" + ((c * 137.508) % 360).toFixed(0) + ",55%,50%)";
  }

  /* One model's data plus the folder its files live in ("" or "b/"). */
  function Model(data, base) {
    this.data = data;
    this.base = base || "";
    this.pos = {};
    var ids = data.dims.id;
    for (var i = 0; i < ids.length; i++) this.pos[ids[i]] = i;
  }
  Model.prototype.size = function () { return this.data.dims.id.length; };
  Model.prototype.dim = function (i) {
    var d = this.data.dims;
    return {
      pos: i,
      id: d.id[i],
      count: d.count[i],
      freq: d.count[i] / this.data.meta.n_images,
      majority: d.majority[i],
      purity: d.purity[i],
      evidence: d.evidence[i],
      topPurity: d.top_purity[i],
      significant: d.significant[i],
      mean: d.mean[i],
      gate: d.gate ? d.gate[i] : null,
      top: d.top[i],
      topValue: d.top_value[i],
      random: d.random[i],
      randomValue: d.random_value[i],
      classCounts: d.class_counts[i],
      hist: d.hist[i],
      histLow: d.hist_low[i],
      histHigh: d.hist_high[i]
    };
  };
  Model.prototype.className = function (c) { return this.data.class_names[c]; };
  Model.prototype.href = function (id) { return this.base + "dim.html?d=" + id; };

  /* A tile of a sprite sheet, scaled to `size` px on its longer side. */
  Model.prototype.thumb = function (tile, size, value) {
    var s = this.data.sprite;
    var sheet = Math.floor(tile / s.per_sheet);
    var r = tile % s.per_sheet;
    var row = Math.floor(r / s.cols);
    var col = r % s.cols;
    var scale = size / Math.max(s.tile_w, s.tile_h);
    var label = this.data.images.label[tile];
    var title = "image " + this.data.images.index[tile] + " · " + this.className(label);
    if (value !== undefined) title += " · activation " + num(value);
    return '<span class="thumb" title="' + esc(title) + '" style="width:' + (s.tile_w * scale) +
      "px;height:" + (s.tile_h * scale) + 'px"><img src="' + esc(this.base + s.files[sheet]) +
      '" alt="' + esc(this.className(label)) + '" draggable="false" style="width:' +
      (s.sheet_w * scale) + "px;left:" + (-(col * s.cell_w + s.margin) * scale) + "px;top:" +
      (-(row * s.cell_h + s.margin) * scale) + 'px"></span>';
  };

  function classTag(model, c) {
    var ink = c < PALETTE.length && LIGHT.indexOf(c) >= 0 ? "#1d2330" : "#fff";
    return '<span class="cls" style="--c:' + classColor(c) + ";color:" + ink + '">' +
      esc(model.className(c)) + "</span>";
  }

  /* The majority class of the images a dimension fires on: a coloured badge when it beats the
   * label-shuffled baseline, else its name in grey, marked "n.s." (not a class the dimension
   * stands for). The purity shown beside it is always that class's share of the same images. */
  function majorityTag(model, d) {
    if (d.significant) return classTag(model, d.majority);
    return '<span class="cls weak" title="most frequent class, not significant">' +
      esc(model.className(d.majority)) + '</span> <span class="ns" title="not significant: ' +
      "the label-shuffled baseline reaches this purity (p > " + model.data.meta.significance +
      ')">n.s.</span>';
  }

  /* The default order's rule, in one sentence (see solo_bayesncl.metrics.evidence_order). */
  function orderRule(meta) {
    return "Default order: by evidence, the 95% Wilson lower bound of the purity (the majority " +
      "class's share of the images a dimension fires on), which discounts a purity resting " +
      "on few images; dimensions firing on fewer than " + +(100 * meta.min_support).toFixed(2) +
      "% of the images come after all others.";
  }

  function nav(model, current) {
    var n = model.data.nav || { root: "", compare: null };
    var links = [];
    var home = n.root + (n.side === "b" ? "b/" : "") + "index.html";
    links.push('<a href="' + home + '"' + (current === "index" ? ' class="on"' : "") +
      ">Dimensions</a>");
    if (n.compare) {
      links.push('<a href="' + n.compare + '"' + (current === "compare" ? ' class="on"' : "") +
        ">Compare models</a>");
    }
    return '<nav class="top"><span class="brand">Feature dashboard</span>' +
      '<span class="model">' + esc(model.data.meta.method) + "</span>" + links.join("") +
      "</nav>";
  }

  /* ---------------------------------------------------------------- index */
  /* A card shows the top images its "purity of the top N images" is taken over. */
  function cardStrip(model, i) {
    var d = model.data.dims;
    var top = d.top[i], values = d.top_value[i], html = "";
    for (var t = 0; t < Math.min(model.data.meta.top_purity_images, top.length); t++) {
      html += model.thumb(top[t], THUMB_CARD, values[t]);
    }
    return html;
  }

  /* Large dashboards fill a card's thumbnails only when it nears the viewport. */
  function fillStripsLazily(model, els) {
    if (!("IntersectionObserver" in window)) {
      els.forEach(function (el) { fill(el); });
      return;
    }
    var io = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) {
        if (e.isIntersecting) { fill(e.target); io.unobserve(e.target); }
      });
    }, { rootMargin: "600px 0px" });
    els.forEach(function (el) { io.observe(el); });
    function fill(el) {
      el.querySelector(".strip").innerHTML = cardStrip(model, +el.dataset.pos);
      el.dataset.filled = "1";
    }
  }

  function renderIndex(model) {
    var data = model.data;
    var opts = data.class_names.map(function (name, c) {
      return '<option value="' + c + '">' + esc(name) + "</option>";
    }).join("");
    var sorts = '<option value="evidence">strongest evidence</option>' +
      '<option value="least">weakest evidence</option>' +
      '<option value="count">images fired on</option>' +
      '<option value="purity">purity</option>' +
      (data.dims.gate ? '<option value="gate">gate-open rate</option>' : "") +
      '<option value="id">dimension id</option>';
    var eager = model.size() <= EAGER_CARDS;
    var cards = [];
    for (var i = 0; i < model.size(); i++) {
      var d = model.dim(i);
      var share = "share of " + model.className(d.majority) + " among the " + d.count +
        " images it fires on";
      cards.push('<a class="card" href="' + model.href(d.id) + '" data-pos="' + i +
        '" data-majority="' + d.majority + '" data-class="' +
        esc(model.className(d.majority).toLowerCase()) + '" data-id="' + d.id + '"' +
        (eager ? ' data-filled="1"' : "") +
        '><div class="card-head"><span class="dim-id">dim ' +
        d.id + "</span>" + majorityTag(model, d) + '</div><div class="bar" title="' +
        esc(share) + '"><i style="width:' + (100 * d.purity).toFixed(1) + "%;background:" +
        (d.significant ? classColor(d.majority) : "#9aa3b2") + '"></i></div>' +
        '<div class="stats"><span class="purity" title="' + esc(share) + '"><b>' +
        pct(d.purity) + '</b> purity</span><span class="evidence" title="95% lower bound of ' +
        'the purity over ' + d.count + ' images: the default order"><b>' + pct(d.evidence) +
        '</b> evidence</span><span class="support"><b>' + d.count + "</b> images (" +
        pct(d.freq) + ")</span>" +
        (d.gate !== null ? "<span><b>" + pct(d.gate) + "</b> gate open</span>" : "") +
        '</div><div class="strip" style="height:' + THUMB_CARD + 'px">' +
        (eager ? cardStrip(model, i) : "") + "</div></a>");
    }
    /* the header (title and figures) is written into index.html by the builder */
    document.getElementById("nav").outerHTML = nav(model, "index");
    document.getElementById("page").innerHTML =
      '<section class="controls"><label>Majority class <select id="class-filter">' +
      '<option value="all">all classes</option>' + opts + "</select></label>" +
      '<label>Search <input id="search" type="search" list="class-names" ' +
      'placeholder="class or dim id" size="14"></label><datalist id="class-names">' +
      data.class_names.map(function (name) {
        return '<option value="' + esc(name) + '">';
      }).join("") + "</datalist>" +
      '<label title="hide the dimensions that fire on fewer images">Fires on at least ' +
      '<input id="min-support" type="number" min="0" max="100" step="0.1" value="' +
      +(100 * data.meta.min_support).toFixed(2) + '"> % of images</label>' +
      '<label>Sort by <select id="sort">' + sorts + "</select></label>" +
      '<span id="shown" class="muted"></span>' +
      '<p id="order-rule" class="muted small">' + esc(orderRule(data.meta)) + "</p></section>" +
      (model.size() ? "" : '<p class="empty">No dimension fires on any image.</p>') +
      '<div id="cards" class="grid">' + cards.join("") + "</div>";

    var grid = document.getElementById("cards");
    var els = Array.prototype.slice.call(grid.children);
    var filter = document.getElementById("class-filter");
    var sort = document.getElementById("sort");
    var search = document.getElementById("search");
    var support = document.getElementById("min-support");
    var state = new URLSearchParams(location.hash.slice(1));
    if (state.get("class") !== null) filter.value = state.get("class");
    if (state.get("sort") !== null) sort.value = state.get("sort");
    if (state.get("q") !== null) search.value = state.get("q");
    if (state.get("support") !== null) support.value = state.get("support");
    if (!filter.value) filter.value = "all";
    if (!sort.value) sort.value = "evidence";

    function key(el) {
      var d = data.dims, i = +el.dataset.pos;
      switch (sort.value) {
        case "purity": return [-d.purity[i], -d.count[i]];
        case "gate": return [-d.gate[i], -d.count[i]];
        case "id": return [d.id[i], 0];
        case "count": return [-d.count[i], d.id[i]];
        case "least": return [-i, 0];
        default: return [i, 0]; /* data.js lists the best-evidenced first */
      }
    }
    /* a card matches the search when its majority class contains the text, or its id is it */
    function matches(el, q) {
      if (!q) return true;
      var id = q.replace(/^dim\s*/, "");
      return el.dataset.class.indexOf(q) >= 0 || (/^\d+$/.test(id) && el.dataset.id === id);
    }
    var order = "evidence";
    function apply() {
      var cls = filter.value;
      var q = search.value.trim().toLowerCase();
      var minCount = (parseFloat(support.value) || 0) / 100 * data.meta.n_images;
      var shown = 0;
      els.forEach(function (el) {
        var hide = (cls !== "all" && el.dataset.majority !== cls) || !matches(el, q) ||
          data.dims.count[+el.dataset.pos] < minCount;
        el.hidden = hide;
        if (!hide) shown++;
      });
      if (sort.value !== order) {
        var sorted = els.slice().sort(function (a, b) {
          var ka = key(a), kb = key(b);
          return ka[0] - kb[0] || ka[1] - kb[1];
        });
        var frag = document.createDocumentFragment();
        sorted.forEach(function (el) { frag.appendChild(el); });
        grid.appendChild(frag);
        order = sort.value;
      }
      document.getElementById("shown").textContent = shown + " of " + els.length +
        " active dimensions";
      history.replaceState(null, "", "#class=" + cls + "&sort=" + sort.value + "&support=" +
        encodeURIComponent(support.value) + (q ? "&q=" + encodeURIComponent(q) : ""));
    }
    filter.addEventListener("change", apply);
    sort.addEventListener("change", apply);
    search.addEventListener("input", apply);
    support.addEventListener("input", apply);
    apply();
    if (!eager) fillStripsLazily(model, els);
    document.title = data.meta.method + " · feature dashboard";
  }

  /* ----------------------------------------------------------- dimension */
  function gallery(model, tiles, values) {
    if (!tiles.length) return '<p class="muted">none</p>';
    return '<div class="gallery">' + tiles.map(function (t, j) {
      var label = model.data.images.label[t];
      return '<figure>' + model.thumb(t, THUMB_PAGE, values[j]) + "<figcaption><b>" +
        num(values[j]) + '</b><span><i class="dot" style="background:' + classColor(label) +
        '"></i>' + esc(model.className(label)) + "</span></figcaption></figure>";
    }).join("") + "</div>";
  }

  function classHistogram(model, d) {
    var max = Math.max.apply(null, d.classCounts.concat([1]));
    var sizes = model.data.class_sizes;
    return '<div class="hbars">' + d.classCounts.map(function (n, c) {
      return '<div class="hrow' + (c === d.majority ? " major" : "") + '"><span class="hname">' +
        esc(model.className(c)) + '</span><span class="htrack"><i style="width:' +
        (100 * n / max).toFixed(1) + "%;background:" + classColor(c) + '"></i></span>' +
        '<span class="hval">' + n + ' <span class="muted">(' + pct(n / d.count) + ", " +
        pct(sizes[c] ? n / sizes[c] : 0) + " of class)</span></span></div>";
    }).join("") + "</div>";
  }

  function activationHistogram(d) {
    var W = 520, H = 170, padL = 44, padB = 26, padT = 8, padR = 8;
    var bins = d.hist.length, max = Math.max.apply(null, d.hist.concat([1]));
    var bw = (W - padL - padR) / bins;
    var bars = d.hist.map(function (n, b) {
      var h = (H - padB - padT) * n / max;
      return '<rect x="' + (padL + b * bw + 1).toFixed(1) + '" y="' + (H - padB - h).toFixed(1) +
        '" width="' + Math.max(bw - 2, 1).toFixed(1) + '" height="' + h.toFixed(1) +
        '"><title>' + n + " images</title></rect>";
    }).join("");
    var axis = '<line x1="' + padL + '" y1="' + (H - padB) + '" x2="' + (W - padR) + '" y2="' +
      (H - padB) + '" />' +
      '<text x="' + padL + '" y="' + (H - 8) + '">' + num(d.histLow) + "</text>" +
      '<text x="' + (W - padR) + '" y="' + (H - 8) + '" text-anchor="end">' + num(d.histHigh) +
      "</text>" + '<text x="' + (padL - 6) + '" y="' + (padT + 10) + '" text-anchor="end">' +
      max + "</text>" + '<text x="' + (padL - 6) + '" y="' + (H - padB) +
      '" text-anchor="end">0</text>';
    return '<svg class="hist" viewBox="0 0 ' + W + " " + H + '" role="img" ' +
      'aria-label="activation histogram">' + bars + axis + "</svg>";
  }

  function renderDim(model) {
    var app = document.getElementById("app");
    var m = model.data.meta;
    var id = parseInt(new URLSearchParams(location.search).get("d"), 10);
    var i = model.pos[id];
    if (i === undefined) {
      app.innerHTML = nav(model, "dim") + '<section class="head"><h1>Dimension ' +
        esc(isNaN(id) ? "?" : id) + '</h1><p class="empty">' + (isNaN(id) || id < 0 ||
        id >= m.n_dims ? "No such dimension (this model has " + m.n_dims + ")." :
        "This dimension never fires (|activation| ≤ " + m.eps + " on every image).") +
        "</p></section>";
      return;
    }
    var d = model.dim(i);
    var prev = i > 0 ? model.dim(i - 1).id : null;
    var next = i + 1 < model.size() ? model.dim(i + 1).id : null;
    var facts = [
      [majorityTag(model, d), "majority class"],
      [pct(d.purity), "purity: its share of the images fired on"],
      [pct(d.evidence), "evidence: 95% lower bound of the purity"],
      [pct(d.topPurity), "share of " + model.className(d.majority) + " among the top " +
        m.top_purity_images + " images"],
      [d.count + " <small>(" + pct(d.freq) + ")</small>", "images fired on"],
      [num(d.mean), "mean |activation| when firing"]
    ];
    if (d.gate !== null) facts.push([pct(d.gate), "gate-open rate"]);
    var pager = '<div class="pager">' +
      (prev !== null ? '<a href="' + model.href(prev) + '">← dim ' + prev + "</a>" :
        "<span></span>") +
      '<span class="muted">' + (i + 1) + " of " + model.size() + " by evidence</span>" +
      (next !== null ? '<a href="' + model.href(next) + '">dim ' + next + " →</a>" :
        "<span></span>") +
      "</div>";
    app.innerHTML = nav(model, "dim") + '<section class="head">' + pager +
      '<h1 id="dim-title">Dimension ' + d.id + ' <span class="muted">· ' + esc(m.method) +
      "</span></h1>" + '<div class="facts">' + facts.map(function (f) {
        return '<div class="fact"><b>' + f[0] + '</b><span class="label">' + esc(f[1]) +
          "</span></div>";
      }).join("") + "</div></section>" +
      '<section class="panel"><h2>Top-activating images</h2><p class="muted small">The ' +
      d.top.length + " images it fires on with the largest |activation|; the value is under " +
      "each. The majority class's share of the top " + m.top_purity_images + " is taken over " +
      "the first " + m.top_purity_images + " (it can be low when the strongest activations " +
      "come from another class).</p>" +
      '<div id="top-images">' + gallery(model, d.top, d.topValue) + "</div></section>" +
      '<section class="panel"><h2>Random active images</h2><p class="muted small">' +
      d.random.length + " images drawn uniformly (seed " + m.seed + ") from the " + d.count +
      " this dimension fires on: if they look unlike the top ones, the top ones are " +
      "the exception.</p><div id=\"random-images\">" + gallery(model, d.random, d.randomValue) +
      "</div></section>" +
      '<div class="two"><section class="panel"><h2>Classes of the active images</h2>' +
      '<p class="muted small">Images of each class among the ' + d.count + " it fires on; in " +
      "brackets their share of those, and the share of the class's images it fires on.</p>" +
      classHistogram(model, d) + '</section><section class="panel"><h2>Activation histogram' +
      '</h2><p class="muted small">Values of the ' + d.count + " images with |activation| > " +
      m.eps + "; the other " + (m.n_images - d.count) + " are not drawn.</p>" +
      activationHistogram(d) + "</section></div>";
    document.title = "dim " + d.id + " · " + m.method;
  }

  /* ------------------------------------------------------------- compare */
  function renderCompare(a, b) {
    var app = document.getElementById("app");
    var names = a.data.class_names;
    var opts = names.map(function (n, c) {
      return '<option value="' + c + '">' + esc(n) + "</option>";
    }).join("");
    app.innerHTML = nav(a, "compare") + '<section class="head"><h1>' + esc(a.data.meta.method) +
      ' <span class="muted">vs</span> ' + esc(b.data.meta.method) + "</h1>" +
      '<p class="muted small">For the chosen class c, each model\'s dimensions ranked by ' +
      "specificity = purity × coverage: purity is the share of c among the images the " +
      "dimension fires on, coverage the share of c's images it fires on. 1 means it fires on " +
      "every image of c and on nothing else.</p></section>" +
      '<section class="controls"><label>Class <select id="compare-class">' + opts +
      "</select></label></section>" + '<div class="two" id="compare-cols"></div>';
    var select = document.getElementById("compare-class");
    var initial = new URLSearchParams(location.hash.slice(1)).get("class");
    if (initial !== null && initial < names.length) select.value = initial;

    function column(model, c, home) {
      var s = model.data.specific[c];
      var rows = s.dims.map(function (id, r) {
        var i = model.pos[id];
        var d = model.dim(i);
        var strip = "";
        for (var t = 0; t < Math.min(6, d.top.length); t++) {
          strip += model.thumb(d.top[t], THUMB_CARD, d.topValue[t]);
        }
        return '<a class="row" href="' + model.href(id) + '"><span class="rank">' + (r + 1) +
          '</span><span class="dim-id">dim ' + id + '</span><span class="nums"><b>' +
          num(s.score[r]) + "</b> score · " + pct(s.purity[r]) + " purity · " +
          pct(s.coverage[r]) + ' coverage</span><span class="strip">' + strip + "</span></a>";
      }).join("");
      return '<section class="panel"><h2><a href="' + home + '">' +
        esc(model.data.meta.method) + '</a> <span class="muted small">' +
        model.data.meta.n_active + " active dims</span></h2>" +
        (rows || '<p class="empty">No dimension fires on this class.</p>') + "</section>";
    }
    function apply() {
      var c = +select.value;
      document.getElementById("compare-cols").innerHTML = column(a, c, "index.html") +
        column(b, c, "b/index.html");
      history.replaceState(null, "", "#class=" + c);
    }
    select.addEventListener("change", apply);
    apply();
    document.title = a.data.meta.method + " vs " + b.data.meta.method;
  }

  function fail(msg) {
    document.getElementById("app").innerHTML = '<p class="empty">' + esc(msg) + "</p>";
  }

  var page = document.body.dataset.page;
  if (page === "compare") {
    if (!window.DASHBOARD_A || !window.DASHBOARD_B) return fail("data.js or b/data.js is missing.");
    renderCompare(new Model(window.DASHBOARD_A, ""), new Model(window.DASHBOARD_B, "b/"));
  } else {
    if (!window.DASHBOARD_DATA) return fail("data.js is missing next to this page.");
    performance.mark("dashboard-render-start");
    var model = new Model(window.DASHBOARD_DATA, "");
    if (page === "dim") renderDim(model);
    else renderIndex(model);
    performance.measure("dashboard-render", "dashboard-render-start");
  }
})();
