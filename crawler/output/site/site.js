// The crawler's site: search of the package names, filters and sorting of a package's table,
// the pages and filter of the table of all packages, the copy button of "Get started".
// Written for this project; no library, nothing fetched but the site's own scripts. Without it
// the pages are plain tables and links.
"use strict";
(function () {
  var chunks = {};  // search chunk key -> [[name, specs], ...], once loaded
  var waiting = {};

  // A chunk is a script calling crawlerSearch: fetch() of a local file fails from file://.
  window.crawlerSearch = function (key, entries) {
    chunks[key] = entries;
    delete waiting[key];
    search();
  };

  function load(key) {
    if (chunks[key] || waiting[key]) return;
    waiting[key] = true;
    var script = document.createElement("script");
    script.src = "search/" + encodeURIComponent(key) + ".js";
    script.onerror = function () { chunks[key] = []; delete waiting[key]; search(); };
    document.head.appendChild(script);
  }

  function words(name) { return name.toLowerCase().split(/[-_.+]/); }

  function search() {
    var input = document.getElementById("search");
    var list = document.getElementById("results");
    if (!input || !list) return;
    var query = input.value.trim().toLowerCase();
    list.textContent = "";
    if (!query) return;
    var key = query.charAt(0);
    if (!chunks[key]) { load(key); return; }
    var found = chunks[key].filter(function (entry) {
      var name = entry[0].toLowerCase();
      return name.indexOf(query) === 0 || words(entry[0]).some(function (w) {
        return w.indexOf(query) === 0;
      });
    });
    found.slice(0, 200).forEach(function (entry) {
      var item = document.createElement("li");
      var link = document.createElement("a");
      link.href = "packages/" + encodeURIComponent(entry[0] + ".html");
      link.textContent = entry[0];
      item.appendChild(link);
      item.appendChild(document.createTextNode(" (" + entry[1].toLocaleString("en-US") + ")"));
      list.appendChild(item);
    });
    if (!found.length) {
      var none = document.createElement("li");
      none.textContent = "no package matches";
      list.appendChild(none);
    }
  }

  // What a row is filtered by, read from its cells: its stacks (between two a tab, shown as
  // a space: a stack's label may hold a space), its target's family (the target's title),
  // its OS and its compiler.
  var FILTERS = [
    ["stacks", "Stack", function (row) { return row.cells[7].textContent.split("\t"); }],
    ["family", "Target family", function (row) { return [row.cells[5].title]; }],
    ["os", "OS", function (row) { return [row.cells[4].textContent]; }],
    ["compiler", "Compiler", function (row) { return [row.cells[6].textContent]; }]
  ];

  function filterSelects(form, rows, values) {
    var before = document.getElementById("shown");
    return FILTERS.map(function (filter, f) {
      var choices = {};
      rows.forEach(function (row) {
        values.get(row)[f].forEach(function (value) { if (value) choices[value] = true; });
      });
      var label = document.createElement("label");
      var select = document.createElement("select");
      select.dataset.filter = filter[0];
      [""].concat(Object.keys(choices).sort()).forEach(function (value) {
        var option = document.createElement("option");
        option.value = value;
        option.textContent = value || "all";
        select.appendChild(option);
      });
      label.appendChild(document.createTextNode(filter[1] + " "));
      label.appendChild(select);
      form.insertBefore(label, before);
      form.insertBefore(document.createTextNode(" "), before);
      return select;
    });
  }

  function filter(rows, values, selects, shown) {
    var wanted = selects.map(function (select) { return select.value; });
    var visible = 0;
    rows.forEach(function (row) {
      var of = values.get(row);
      var keep = wanted.every(function (want, f) { return !want || of[f].indexOf(want) >= 0; });
      row.hidden = !keep;
      if (keep) visible++;
    });
    shown.textContent = visible + " of " + rows.length + " specs";
  }

  // A spec's dependencies are lines of "name/hash"; unfolded, each becomes a link to the
  // dependency's row when its package has a page (linked in the list under the table).
  function linkDependencies(details, pages) {
    var summary = details.querySelector("summary");
    var lines = [];
    for (var node = summary.nextSibling; node; node = node.nextSibling) {
      lines.push(node.textContent);
    }
    while (summary.nextSibling) details.removeChild(summary.nextSibling);
    lines.join("").split("\n").forEach(function (line, i) {
      if (i) details.appendChild(document.createTextNode("\n"));
      var cut = line.lastIndexOf("/");
      var page = cut > 0 ? pages[line.slice(0, cut)] : undefined;
      if (page === undefined) {
        details.appendChild(document.createTextNode(line));
        return;
      }
      var link = document.createElement("a");
      link.href = page + "#" + line.slice(cut + 1);
      link.textContent = line;
      details.appendChild(link);
    });
  }

  var collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });

  function sort(table, header) {
    var column = Number(header.dataset.sort);
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th[data-sort]").forEach(function (th) {
      th.setAttribute("aria-sort", "none");
    });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var order = collator.compare(sortText(a, column), sortText(b, column));
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  // A count is written with thousands separators (1,234), which the collator would read as
  // two numbers; a cell that shows a rounded figure (a size, 12.3 MB) sorts by its data-value.
  function sortText(row, column) {
    var cell = row.cells[column];
    if (cell.dataset.value) return cell.dataset.value;
    var value = cell.textContent;
    return /^[0-9,]+$/.test(value) ? value.replace(/,/g, "") : value;
  }

  // The table of all packages: a page of rows at a time, of those a word of whose name starts
  // with the filter (or whose name does).
  function catalogPage() {
    var table = document.getElementById("catalog");
    var form = document.getElementById("catalog-filters");
    if (!table || !form) return;
    var size = Number(table.dataset.pageRows);
    var input = document.getElementById("catalog-filter");
    var shown = document.getElementById("catalog-shown");
    var previous = document.getElementById("previous");
    var next = document.getElementById("next");
    var first = 0;
    function show() {
      var query = input.value.trim().toLowerCase();
      var rows = Array.prototype.slice.call(table.tBodies[0].rows);
      var matching = rows.filter(function (row) {
        var name = row.cells[0].textContent;
        return !query || name.toLowerCase().indexOf(query) === 0 ||
          words(name).some(function (w) { return w.indexOf(query) === 0; });
      });
      if (first >= matching.length) first = Math.max(0, matching.length - size);
      rows.forEach(function (row) { row.hidden = true; });
      matching.slice(first, first + size).forEach(function (row) { row.hidden = false; });
      var last = Math.min(first + size, matching.length);
      shown.textContent = matching.length ? (first + 1) + " to " + last + " of " +
        matching.length.toLocaleString("en-US") + " packages" : "no package matches";
      previous.disabled = first === 0;
      next.disabled = last >= matching.length;
    }
    input.addEventListener("input", function () { first = 0; show(); });
    previous.addEventListener("click", function () { first = Math.max(0, first - size); show(); });
    next.addEventListener("click", function () { first += size; show(); });
    table.querySelectorAll("th[data-sort]").forEach(function (th) {
      th.addEventListener("click", function () { sort(table, th); first = 0; show(); });
    });
    form.addEventListener("submit", function (event) { event.preventDefault(); });
    form.hidden = false;
    show();
  }

  // "Get started": copies the commands. The clipboard API may be refused (a page from
  // file:// in some browsers): the selection and the copy command then do it.
  function copyButtons() {
    document.querySelectorAll("button[data-copy]").forEach(function (button) {
      var source = document.getElementById(button.dataset.copy);
      button.hidden = false;
      button.addEventListener("click", function () {
        var value = source.textContent;
        var done = function () { button.textContent = "Copied"; };
        var fallback = function () {
          var range = document.createRange();
          range.selectNodeContents(source);
          var selection = window.getSelection();
          selection.removeAllRanges();
          selection.addRange(range);
          if (document.execCommand("copy")) done();
        };
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(value).then(done, fallback);
        } else {
          fallback();
        }
      });
    });
  }

  function packagePage() {
    var table = document.getElementById("specs");
    var form = document.getElementById("filters");
    if (!table || !form) return;
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var values = new Map();  // row -> what it is filtered by, one list per filter
    rows.forEach(function (row) {
      values.set(row, FILTERS.map(function (filter) { return filter[2](row); }));
    });
    var selects = filterSelects(form, rows, values);
    var shown = document.getElementById("shown");
    selects.forEach(function (s) {
      s.addEventListener("change", function () { filter(rows, values, selects, shown); });
    });
    form.hidden = false;
    table.querySelectorAll("th[data-sort]").forEach(function (th) {
      th.addEventListener("click", function () { sort(table, th); });
    });
    var pages = Object.create(null);  // a package's name -> its page, for its dependents
    document.querySelectorAll("#depends a").forEach(function (link) {
      pages[link.textContent] = link.getAttribute("href");
    });
    // "toggle" does not bubble: it is caught on its way down to each <details>.
    table.addEventListener("toggle", function (event) {
      var details = event.target;
      if (!details.open || !details.classList.contains("deps") || details.dataset.linked) return;
      details.dataset.linked = "1";
      linkDependencies(details, pages);
    }, true);
  }

  function frontPage() {
    var form = document.getElementById("search-form");
    if (!form) return;
    form.hidden = false;
    form.addEventListener("submit", function (event) { event.preventDefault(); });
    document.getElementById("search").addEventListener("input", search);
  }

  packagePage();
  frontPage();
  catalogPage();
  copyButtons();
})();
