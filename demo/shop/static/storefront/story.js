// The story's button: one form post that takes seconds. While it runs the button is
// disabled and the line under it counts the seconds, so nothing invites a second
// click. The server refuses a second story whatever a page does (409, see
// demo/shop/story/one_at_a_time.py); this is for the reader, not a defence.
(function () {
  "use strict";

  // The sentences, in the page's language (base.html's script-messages island).
  var MESSAGES = JSON.parse(document.getElementById("script-messages").textContent);
  function say(name, values) {
    return MESSAGES[name].replace(/%\((\w+)\)s/g, function (_, key) { return String(values[key]); });
  }

  document.querySelectorAll("form[data-story]").forEach(function (form) {
    var button = form.querySelector("button[type=submit]");
    var status = form.querySelector("[data-story-status]");
    var label = button.textContent;
    var timer = null;

    function reset() {
      clearInterval(timer);
      delete form.dataset.running;
      button.disabled = false;
      button.textContent = label;
      status.textContent = "";
    }

    form.addEventListener("submit", function (event) {
      if (form.dataset.running) {  // Enter pressed again, or a script's second submit
        event.preventDefault();
        return;
      }
      form.dataset.running = "true";
      var started = Date.now();
      function tick() {
        var seconds = Math.floor((Date.now() - started) / 1000);
        status.textContent = say("story_running", { seconds: seconds, about: form.dataset.storyAbout });
      }
      tick();
      timer = setInterval(tick, 1000);
      // The browser has taken this submit already; disabling the button now stops the next.
      button.disabled = true;
      button.textContent = say("story_button", {});
    });

    // Back from the story's page (the back/forward cache keeps this page as it was left).
    window.addEventListener("pageshow", function (event) {
      if (event.persisted) { reset(); }
    });
  });
})();
