// The crawler's site: search of the package names, filters and sorting of a package's table.
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
      item.appendChild(document.createTextNode(" (" + entry[1] + ")"));
      list.appendChild(item);
    });
    if (!found.length) {
      var none = document.createElement("li");
      none.textContent = "no package matches";
      list.appendChild(none);
    }
  }

  function filter(table, selects, shown) {
    var rows = table.tBodies[0].rows, visible = 0;
    for (var i = 0; i < rows.length; i++) {
      var row = rows[i], keep = true;
      selects.forEach(function (select) {
        var want = select.value, key = select.dataset.filter;
        if (!want) return;
        if (key === "stacks") keep = keep && JSON.parse(row.dataset.stacks).indexOf(want) >= 0;
        else keep = keep && row.dataset[key] === want;
      });
      row.hidden = !keep;
      if (keep) visible++;
    }
    shown.textContent = visible + " of " + rows.length + " specs";
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
      var order = collator.compare(a.cells[column].textContent, b.cells[column].textContent);
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  function packagePage() {
    var table = document.getElementById("specs");
    var form = document.getElementById("filters");
    if (!table || !form) return;
    var selects = Array.prototype.slice.call(form.querySelectorAll("select[data-filter]"));
    var shown = document.getElementById("shown");
    selects.forEach(function (s) {
      s.addEventListener("change", function () { filter(table, selects, shown); });
    });
    form.hidden = false;
    table.querySelectorAll("th[data-sort]").forEach(function (th) {
      th.addEventListener("click", function () { sort(table, th); });
    });
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
})();
