// Console behaviour that htmx attributes cannot express: row selection with
// "select all N matching", and an immediate refresh when a hidden tab becomes visible.
(function () {
  "use strict";

  function table() { return document.getElementById("receipt-table"); }

  function rowBoxes() {
    var t = table();
    return t ? Array.prototype.slice.call(t.querySelectorAll('input[name="selected"]')) : [];
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

  // Pollers (data-poll) skip their ticks while the tab is hidden. This is done here rather
  // than with an hx-trigger filter ([!document.hidden]): htmx evaluates filters as strings,
  // which the Content-Security-Policy (script-src 'self', no unsafe-eval) refuses.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (document.hidden && elt && elt.hasAttribute("data-poll")) event.preventDefault();
  });

  // Catch up at once when the operator comes back instead of waiting for the next tick.
  document.addEventListener("visibilitychange", function () {
    if (document.hidden || !window.htmx) return;
    var banner = document.getElementById("new-banner");
    if (banner) window.htmx.trigger(banner, "receipts-changed");
  });
})();
