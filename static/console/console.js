// Console behaviour that htmx attributes cannot express: row selection with
// "select all N matching" (and the bulk button saying how many it will take), pollers that
// pause while the tab is hidden or the operator is typing in them, an immediate refresh
// when a hidden tab becomes visible, and Escape to close an open row form. No eval, no
// inline code: it runs under a strict CSP.
(function () {
  "use strict";

  function table() { return document.getElementById("receipt-table"); }

  function rowBoxes() {
    var t = table();
    return t ? Array.prototype.slice.call(t.querySelectorAll('input[name="selected"]')) : [];
  }

  // The bulk button names its count: "Requeue 40 receipts…" for all matching, else the
  // number of ticked rows, so the operator sees what the plan will hold before the dry run.
  function syncBulkLabel() {
    var t = table();
    var button = t && t.querySelector('[data-role="bulk-submit"]');
    var flag = document.getElementById("all-matching");
    if (!button || !flag) return;
    if (flag.value === "1") {
      button.textContent = button.dataset.labelAll;
      return;
    }
    var n = rowBoxes().filter(function (b) { return b.checked; }).length;
    button.textContent = n
      ? "Requeue " + n + " selected receipt" + (n === 1 ? "" : "s") + "… (dry run first)"
      : "Requeue selected… (dry run first)";
  }

  function setAllMatching(on) {
    var flag = document.getElementById("all-matching");
    var t = table();
    if (!flag || !t) return;
    flag.value = on ? "1" : "";
    var offer = t.querySelector("#select-all-banner");
    var chosen = t.querySelector("#all-matching-banner");
    if (chosen) chosen.hidden = !on;
    if (offer && on) offer.hidden = true;
    syncBulkLabel();
  }

  function syncOffer() {
    var t = table();
    if (!t) return;
    var boxes = rowBoxes();
    var all = boxes.length > 0 && boxes.every(function (b) { return b.checked; });
    var head = t.querySelector('[data-action="select-page"]');
    if (head) head.checked = all;
    var offer = t.querySelector("#select-all-banner");
    var total = parseInt((t.querySelector("#total-matching") || {}).dataset ? t.querySelector("#total-matching").dataset.total : "0", 10);
    if (offer) {
      offer.hidden = !(all && total > boxes.length);
      var count = offer.querySelector('[data-role="page-count"]');
      if (count) count.textContent = String(boxes.length);
    }
    if (!all) setAllMatching(false);
    syncBulkLabel();
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches && target.matches('[data-action="select-page"]')) {
      rowBoxes().forEach(function (b) { b.checked = target.checked; });
      syncOffer();
    } else if (target.matches && target.matches('input[name="selected"]')) {
      syncOffer();
    }
  });

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!target.closest) return;
    if (target.closest('[data-action="select-all-matching"]')) {
      setAllMatching(true);
    } else if (target.closest('[data-action="clear-selection"]')) {
      rowBoxes().forEach(function (b) { b.checked = false; });
      setAllMatching(false);
      syncOffer();
    }
  });

  // Pollers ([data-poll]) skip their ticks while the tab is hidden, and while the operator
  // has a form open or focused inside them (a swap would throw away what they typed).
  function busy(elt) {
    var active = document.activeElement;
    return !!(elt.querySelector("details[open]") ||
      (active && active !== document.body && elt.contains(active) && active.matches("input, textarea, select")));
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll")) return;
    if (event.detail.requestConfig && event.detail.requestConfig.verb !== "get") return;
    if (document.hidden || busy(elt)) event.preventDefault();
  });

  // Escape closes the form the operator opened ("Requeue…" on a row or a failure group):
  // the one around the focus, else the last one open. Focus returns to its summary.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.defaultPrevented) return;
    var active = document.activeElement;
    var around = active && active.closest ? active.closest("details[open]") : null;
    var open = around && around.querySelector("form") ? around : null;
    if (!open) {
      var all = Array.prototype.filter.call(
        document.querySelectorAll("details[open]"),
        function (d) { return !!d.querySelector("form"); });
      open = all.length ? all[all.length - 1] : null;
    }
    if (!open) return;
    open.open = false;
    var summary = open.querySelector("summary");
    if (summary) summary.focus();
    event.preventDefault();
  });

  // Every table cell carries its column's header as data-label, so a table that becomes
  // cards on a phone (console.css, "Stacked tables") can say what each value is. Read from
  // the header row, so a column added to a template is labelled with no markup of its own;
  // run on load and on every htmx swap (a swapped row takes its table's headers).
  function labelCells(root) {
    var tables = [];
    if (root.closest) {
      var around = root.closest("table");
      if (around) tables.push(around);
    }
    if (root.querySelectorAll) {
      Array.prototype.push.apply(tables, root.querySelectorAll("table"));
    }
    tables.forEach(function (t) {
      var head = t.tHead && t.tHead.rows[0];
      if (!head) return;
      var names = [];
      Array.prototype.forEach.call(head.cells, function (th) {
        for (var i = 0; i < (th.colSpan || 1); i++) names.push(th.textContent.trim());
      });
      Array.prototype.forEach.call(t.tBodies, function (body) {
        Array.prototype.forEach.call(body.rows, function (tr) {
          var col = 0;
          Array.prototype.forEach.call(tr.cells, function (td) {
            var name = names[col] || "";
            if (td.colSpan === 1 && name && !td.hasAttribute("data-label")) {
              td.setAttribute("data-label", name);
            }
            col += td.colSpan || 1;
          });
        });
      });
    });
  }
  labelCells(document);
  document.addEventListener("htmx:load", function (event) { labelCells(event.target); });

  // Catch up at once when the operator comes back instead of waiting for the next tick.
  document.addEventListener("visibilitychange", function () {
    if (document.hidden || !window.htmx) return;
    window.htmx.trigger(document.body, "receipts-changed");
  });
})();
