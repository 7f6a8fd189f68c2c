// The pay button, enhanced: every click is sent, every answer shown as it happened,
// and an answer that says "same key, later" (409 in flight, 503 unknown) is retried
// with the SAME key, after an exponential backoff with jitter, never at once.
// Without JavaScript the same form posts normally and the page shows the answer.
//
// These are the rules of the Python client, onceshop_client (retry.py), in the
// browser: one key per intent (the form's); the same key again after no answer, a
// 5xx or a 409 "in use"; never after any other 4xx (final: paying again is a new
// intent, and the refreshed page carries a new key); capped exponential backoff
// with full jitter, never sooner than Retry-After; a budget of MAX_RETRIES.
(function () {
  "use strict";

  // Backoff: the n-th retry waits a random time in [0, c] with c = min(CAP, BASE * 2^n)
  // (full jitter), and never less than the server's Retry-After. Jitter keeps many
  // clients that failed together from retrying together (a retry storm, `make lab
  // EXP=8`); the cap bounds one wait.
  var BASE_S = 1;
  var CAP_S = 30;
  // After this many retries the page stops and says so: the reconciler settles the
  // payment without us, and a reload shows the result.
  var MAX_RETRIES = 8;
  var requests = 0;
  var answered = 0;  // answers received so far: the server may answer click 2 first

  // The sentences, in the page's language (base.html's script-messages island).
  var MESSAGES = JSON.parse(document.getElementById("script-messages").textContent);
  function say(name, values) {
    return MESSAGES[name].replace(/%\((\w+)\)s/g, function (_, key) { return String(values[key]); });
  }

  function ordinal(n) { return MESSAGES.ordinals[n - 1] || say("nth", { n: n }); }

  function backoffSeconds(retry, retryAfter) {
    var ceiling = Math.min(CAP_S, BASE_S * Math.pow(2, retry));
    var jittered = Math.random() * ceiling;
    return Math.max(retryAfter || 0, jittered);
  }

  function addEntry(text) {
    var list = document.getElementById("answers");
    var item = document.createElement("li");
    item.textContent = text;
    list.appendChild(item);
    return item;
  }

  function showAnswer(item, label, answer) {
    item.textContent = "";
    var head = document.createElement("strong");
    head.textContent = say("label", { label: label });
    item.appendChild(head);
    var box = document.createElement("div");
    box.className = "answer " + (answer.status < 300 ? "ok" : answer.retry_same_key ? "wait" : "bad");
    var line = document.createElement("p");
    var status = document.createElement("strong");
    status.textContent = "HTTP " + answer.status + (answer.code ? " " + answer.code : "");
    var freshness = answer.freshness || (answer.replayed ? "replayed" : "not stored");
    var badge = document.createElement("span");
    badge.className = "badge " + freshness.replace(" ", "-");
    badge.textContent = {
      "replayed": say("replayed", {}) + " · Idempotent-Replayed: true",
      "fresh": say("fresh", {}) + " · Idempotent-Replayed: false",
      "not stored": say("not_stored", {})
    }[freshness];
    line.appendChild(status);
    line.appendChild(document.createTextNode(" "));
    line.appendChild(badge);
    var why = document.createElement("p");
    why.textContent = answer.why || "";
    box.appendChild(line);
    box.appendChild(why);
    if (answer.note) {
      var note = document.createElement("p");
      note.className = "note";
      note.textContent = answer.note;
      box.appendChild(note);
    }
    item.appendChild(box);
    return box;
  }

  // Replace the summary, the pay form, the refund form (once paid) and the timeline
  // with fresh copies of the order page (the same templates render them), keeping
  // the answers list.
  function refresh() {
    var page = document.getElementById("order-page");
    if (!page) { return; }
    fetch(page.getAttribute("data-order-url"), { credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        ["order-summary", "pay-section", "refund-slot", "timeline"].forEach(function (id) {
          var now = document.getElementById(id);
          var next = fresh.getElementById(id);
          if (now && next) { now.replaceWith(document.importNode(next, true)); }
        });
      })
      .catch(function () { /* the answers stay; a manual reload shows the rest */ });
  }

  // While the shop waits on the provider the page says so, with the seconds ticking,
  // instead of a bare "sent…": a slow provider is a visible state, not a frozen page.
  function waiting(item, title, timeoutS) {
    var started = Date.now();
    function tick() {
      var seconds = ((Date.now() - started) / 1000).toFixed(0);
      item.textContent = say("waiting", { title: title, timeout: timeoutS, seconds: seconds });
    }
    tick();
    return window.setInterval(tick, 1000);
  }

  function send(form, key, click, retry) {
    var label = say("click", { click: click });
    var title = retry ? say("click_retry", { label: label, retry: retry }) : label;
    var item = addEntry(say("sent", { title: title }));
    var ticking = waiting(item, title, form.getAttribute("data-provider-timeout") || "?");
    var body = new URLSearchParams();
    body.set("idempotency_key", key);
    body.set("click", String(click));
    if (retry) { body.set("retry", String(retry)); }
    fetch(form.action, {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Accept": "application/json",
        "X-CSRFToken": form.elements.csrfmiddlewaretoken.value
      },
      body: body
    })
      .then(function (response) {
        return response.json().catch(function () {
          // Not ours (a proxy's 502 page, say). A 5xx may hide work done: same key
          // again; any other status is final.
          var again = response.status >= 500;
          return {
            status: response.status,
            retry_same_key: again,
            retry_after: parseFloat(response.headers.get("Retry-After")) || 0,
            why: again ? say("not_json_retry", {}) : say("not_json_final", {})
          };
        });
      })
      .then(function (answer) {
        window.clearInterval(ticking);
        answered += 1;
        var box = showAnswer(
          item, say("answered", { title: title, ordinal: ordinal(answered) }), answer
        );
        if (answer.retry_same_key && retry < MAX_RETRIES) {
          var wait = backoffSeconds(retry, answer.retry_after);
          var note = document.createElement("p");
          note.textContent = say("retry_in", { seconds: wait.toFixed(1) });
          box.appendChild(note);
          window.setTimeout(function () { send(form, key, click, retry + 1); }, wait * 1000);
        } else if (answer.retry_same_key) {
          var stop = document.createElement("p");
          stop.textContent = say("stopped", {});
          box.appendChild(stop);
        } else {
          refresh();
        }
      })
      .catch(function () {
        window.clearInterval(ticking);
        // No answer at all (network): it may or may not have arrived. Same key again.
        var wait = backoffSeconds(retry, 0);
        item.textContent = say("no_answer", { title: title, seconds: wait.toFixed(1) });
        if (retry < MAX_RETRIES) {
          window.setTimeout(function () { send(form, key, click, retry + 1); }, wait * 1000);
        }
      });
  }

  // Clicks, not submit events: Chromium fires one submit event for a quick double
  // click, and the point here is to send what a person really clicked. Keyboard
  // activation of the button (Enter, Space) is a click too.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("form[data-pay] button[type=submit]");
    if (!button) { return; }
    event.preventDefault();
    var form = button.form;
    // Deliberately no "disable the button": a second click is sent, with the same
    // key, because the server, not the button, is what stops a double charge.
    requests += 1;
    send(form, form.elements.idempotency_key.value, requests, 0);
  });
})();
