// Live numbers without a full reload: an element with data-live-src is refreshed
// every data-live-every seconds from a JSON endpoint. The answer may carry
//   fragments: {elementId: html}  -> that element's content is replaced (the server
//                                   renders it with the page's own templates), and
//   stock: {sku: n}               -> every [data-stock-sku] cell gets its number.
// One request at a time (the next is scheduled when one ends), and none while the
// tab is hidden.
(function () {
  "use strict";

  // The sentences, in the page's language (base.html's script-messages island).
  var MESSAGES = JSON.parse(document.getElementById("script-messages").textContent);
  function say(name, values) {
    return MESSAGES[name].replace(/%\((\w+)\)s/g, function (_, key) { return String(values[key]); });
  }

  function status(root, text) {
    var line = root.querySelector("[data-live-status]") || document.querySelector("[data-live-status]");
    if (line) { line.textContent = text; }
  }

  function apply(data) {
    var fragments = data.fragments || {};
    Object.keys(fragments).forEach(function (id) {
      var element = document.getElementById(id);
      // Only when it changed: an unchanged live region is not announced again.
      if (element && element.innerHTML !== fragments[id]) { element.innerHTML = fragments[id]; }
    });
    var stock = data.stock || {};
    document.querySelectorAll("[data-stock-sku]").forEach(function (cell) {
      var sku = cell.getAttribute("data-stock-sku");
      if (Object.prototype.hasOwnProperty.call(stock, sku)) { cell.textContent = String(stock[sku]); }
    });
  }

  function poll(root) {
    var every = Math.max(1, Number(root.getAttribute("data-live-every")) || 3) * 1000;
    function tick() {
      if (document.hidden) { window.setTimeout(tick, every); return; }
      fetch(root.getAttribute("data-live-src"), {
        credentials: "same-origin",
        headers: { "Accept": "application/json" }
      })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.json();
        })
        .then(function (data) {
          apply(data);
          status(root, say("live_updated", {
            time: new Date().toLocaleTimeString(document.documentElement.lang || undefined)
          }));
        })
        .catch(function (error) {
          status(root, say("live_paused", { error: error.message }));
        })
        .then(function () { window.setTimeout(tick, every); });
    }
    window.setTimeout(tick, every);
  }

  document.querySelectorAll("[data-live-src]").forEach(poll);
})();
