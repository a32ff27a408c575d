/* Sign-in, navigation and page routing (#/page?params). */
"use strict";
(function (TS) {
  const $ = (id) => document.getElementById(id);

  function showSignin(message) {
    TS.me = null;
    $("nav").hidden = true; $("signout").hidden = true; $("who").textContent = "";
    TS.fill($("page"));
    $("signin").hidden = false;
    $("signin-error").textContent = message || "";
    $("signin-key").focus();
  }

  /* Who the session is; 401 (no session yet, or it ended) shows the sign-in. */
  async function identify(signedIn) {
    try {
      TS.me = await TS.get("/console/api/me");
    } catch (err) {
      const lost = "The browser did not send the session cookie back (a Secure cookie over http? see console.cookie_secure).";
      showSignin(err.status === 401 ? (signedIn ? lost : "") : err.message);
      return false;
    }
    $("signin").hidden = true; $("nav").hidden = false;
    $("signout").hidden = TS.me.open;
    $("who").textContent = TS.me.open ? "open local mode (no API keys exist)" : TS.me.caller + " · " + (TS.me.roles.join(", ") || "no roles");
    for (const a of document.querySelectorAll("[data-admin]")) a.hidden = !TS.me.admin;
    return true;
  }

  /* Render the page the address names; `notice` (an element: what an action just did) is shown under its title,
     so the message outlives the re-render that shows the action's effect (it was gone 0.6 s after an approval). */
  async function route(notice) {
    if (!TS.me) return;
    const hash = location.hash.replace(/^#\/?/, "") || "overview";
    const [name, query] = hash.split("?");
    const known = Object.hasOwn(TS.pages, name);  // not `constructor` or `__proto__` from the address bar
    const page = known && !(TS.pages[name].admin && !TS.me.admin) ? TS.pages[name] : TS.pages.overview;
    for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("on", a.dataset.page === name);
    document.title = page.title + " · Toolscout";
    const root = TS.h("div", { class: "page", "data-page": name, "aria-busy": "true" });
    $("page").replaceChildren(root);
    const started = performance.now();
    try {
      await page.render(root, new URLSearchParams(query || ""));
    } catch (err) {
      root.append(TS.problemBox(err));
    }
    if (notice instanceof Node) {
      const box = TS.h("div", { id: "notice", role: "status" }, notice);
      const title = root.querySelector("h1");
      if (title) title.after(box); else root.prepend(box);
    }
    root.setAttribute("aria-busy", "false");
    root.dataset.renderMs = (performance.now() - started).toFixed(1);
  }

  TS.route = route;
  TS.onUnauthorized = () => { if (TS.me) showSignin("The session ended (expired, signed out or its key revoked); sign in again."); };

  document.addEventListener("DOMContentLoaded", async () => {
    $("signin-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const key = $("signin-key").value.trim();
      $("signin-key").value = "";
      try {
        await TS.session.open(key);
      } catch (err) {
        showSignin(err.status === 401 ? "That key is unknown or revoked." : err.message);
        return;
      }
      if (await identify(true)) route();
    });
    $("signout").addEventListener("click", async () => {
      let message = "Signed out.";
      try { await TS.session.close(); } catch (err) { message = "Signing out failed: " + err.message; }
      showSignin(message);
    });
    window.addEventListener("hashchange", route);
    if (await identify()) route();
  });
})(window.TS);
