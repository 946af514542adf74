// The Environments page's progressive script: its forms and buttons call
// /api/v1 with the session cookie and its CSRF token. No build step.
"use strict";

(function () {
  const main = document.querySelector("main");
  const company = main ? main.dataset.company : "";
  let csrf = null;

  async function token() {
    if (csrf === null) {
      const r = await fetch("/api/v1/session", { credentials: "same-origin" });
      const b = await r.json();
      csrf = b.csrfToken || "";
    }
    return csrf;
  }

  // api sends one request; it resolves to {status, body, headers}.
  async function api(method, path, body, headers) {
    const h = Object.assign({ Accept: "application/json" }, headers || {});
    if (method !== "GET") h["X-CSRF-Token"] = await token();
    const init = { method: method, headers: h, credentials: "same-origin" };
    if (body !== undefined) {
      h["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    let b = null;
    const text = await r.text();
    if (text) {
      try { b = JSON.parse(text); } catch (e) { b = { error: { code: "unknown", message: text } }; }
    }
    return { status: r.status, body: b, headers: r.headers };
  }

  function errOf(res) {
    return (res.body && res.body.error) || { code: "unknown", message: "HTTP " + res.status };
  }

  // errLine is an API error for a person: its message, and its reason
  // (else its code) for a search; the detail (the technical chain) is
  // the element's title, shown on hover.
  function errLine(e) { return e.message + " (" + (e.reason || e.code) + ")"; }

  function setText(el, text) { if (el) el.textContent = text; }

  // confirmFirst asks, next to the button b, whether to do what a
  // destructive action will do (text says it), before onYes runs: a
  // sentence, a button labelled yes and a "Cancel". Focus moves to
  // Cancel, Escape cancels, and a second ask on the same button
  // replaces the first. Nothing is sent until yes is pressed.
  function confirmFirst(b, text, yes, onYes) {
    const old = b.parentNode.querySelector(".confirm");
    if (old) old.remove();
    const box = document.createElement("span");
    box.className = "confirm";
    box.setAttribute("role", "alertdialog");
    box.setAttribute("aria-label", yes);
    const p = document.createElement("span");
    p.className = "confirm-text";
    p.textContent = text;
    const ok = document.createElement("button");
    ok.type = "button";
    ok.className = "confirm-yes danger";
    ok.textContent = yes;
    const no = document.createElement("button");
    no.type = "button";
    no.className = "confirm-no";
    no.textContent = "Cancel";
    function close() { box.remove(); b.disabled = false; b.focus(); }
    no.addEventListener("click", close);
    box.addEventListener("keydown", function (ev) { if (ev.key === "Escape") close(); });
    ok.addEventListener("click", function () { box.remove(); b.disabled = false; onYes(); });
    box.append(p, " ", ok, " ", no);
    b.disabled = true;
    b.after(box);
    no.focus();
  }

  // details is a "Details" disclosure holding the technical detail
  // behind a sentence (the error chain, a probe's stages): closed, its
  // summary reached by Tab and opened by Enter, its text selectable, and
  // a Copy button.
  function details(text) {
    const d = document.createElement("details");
    d.className = "more";
    const s = document.createElement("summary");
    s.textContent = "Details";
    const pre = document.createElement("pre");
    pre.className = "detail";
    pre.textContent = text;
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy";
    copy.textContent = "Copy";
    copy.addEventListener("click", async function () {
      try {
        await navigator.clipboard.writeText(text);
        copy.textContent = "Copied";
      } catch (e) {
        const r = document.createRange();
        r.selectNodeContents(pre);
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(r);
        copy.textContent = "Selected: press Ctrl+C to copy";
      }
    });
    d.append(s, pre, copy);
    return d;
  }

  // sentence is a span of class cls holding text.
  function sentence(cls, text) {
    const s = document.createElement("span");
    s.className = cls;
    s.textContent = text;
    return s;
  }

  // showFailure puts an API error where its action was taken: its one
  // sentence, and its detail behind "Details".
  function showFailure(el, prefix, e) {
    const parts = [sentence("sentence", prefix + errLine(e))];
    if (e.detail && e.detail !== e.message) parts.push(details(e.detail));
    el.replaceChildren.apply(el, parts);
  }

  function companyPath(rest) { return "/api/v1/companies/" + encodeURIComponent(company) + rest; }

  function pageURL(params) {
    const u = new URL(window.location.href);
    u.search = "";
    u.searchParams.set("company", company);
    for (const k in params) u.searchParams.set(k, params[k]);
    return u.toString();
  }

  // ---- sections: the address names the one shown (#images, #runs,
  // …; none: Environments); a link to an element in a section (#drivers)
  // shows that section and opens the element's disclosure. Without the
  // script every section shows, one after another. ----
  const sections = Array.from(document.querySelectorAll("main > section.tab"));
  const navLinks = Array.from(document.querySelectorAll("nav.sections a[data-section]"));
  const companyForm = document.getElementById("company-form");
  function showSection() {
    const id = window.location.hash.slice(1);
    const el = id ? document.getElementById(id) : null;
    let sec = el ? el.closest("main > section.tab") : null;
    if (!sec) sec = document.getElementById("environments");
    if (!sec) return;
    sections.forEach(function (s) { s.hidden = s !== sec; });
    navLinks.forEach(function (a) {
      if (a.dataset.section === sec.id) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    });
    // Switching company keeps the section.
    if (companyForm) companyForm.setAttribute("action", "#" + sec.id);
    const d = el && el.closest("details");
    if (d) d.open = true;
  }
  document.querySelectorAll("details[data-keep]").forEach(function (d) {
    const k = "berth.open." + d.id;
    let v = null;
    try { v = window.sessionStorage.getItem(k); } catch (e) { v = null; }
    if (v !== null) d.open = v === "1";
    d.addEventListener("toggle", function () {
      try { window.sessionStorage.setItem(k, d.open ? "1" : "0"); } catch (e) { /* storage off: not kept */ }
    });
  });
  window.addEventListener("hashchange", showSection);
  showSection();

  // ---- the editor (UI-1) ----
  const form = document.getElementById("editor");
  if (form) {
    form.querySelectorAll("button.remove-key").forEach(function (b) {
      b.addEventListener("click", function () {
        const li = b.closest("li");
        const st = li.querySelector(".key-state");
        const label = b.getAttribute("aria-label").replace(/^(Remove|Keep) /, "");
        if (li.dataset.removed) {
          delete li.dataset.removed;
          st.textContent = st.dataset.was;
          b.textContent = "Remove";
          b.setAttribute("aria-label", "Remove " + label);
        } else {
          li.dataset.removed = "1";
          st.dataset.was = st.textContent;
          st.textContent = b.dataset.key + ": removed when you save";
          b.textContent = "Keep";
          b.setAttribute("aria-label", "Keep " + label);
        }
      });
    });
    form.querySelectorAll("button.replace").forEach(function (b) {
      b.addEventListener("click", function () {
        const f = b.closest(".field");
        f.dataset.replace = "1";
        delete f.dataset.clear;
        const ta = f.querySelector("textarea");
        ta.hidden = false;
        ta.focus();
        setText(f.querySelector(".secret-state"), "replacing: paste the new value");
      });
    });
    form.querySelectorAll("button.clear").forEach(function (b) {
      b.addEventListener("click", function () {
        const f = b.closest(".field");
        f.dataset.clear = "1";
        delete f.dataset.replace;
        f.querySelector("textarea").hidden = true;
        setText(f.querySelector(".secret-state"), "cleared: saved without this field");
      });
    });
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      save();
    });
    // "Saved — revision N" stays until the next edit.
    const clearSaved = function () {
      const b = document.getElementById("saved-badge");
      if (b) b.remove();
    };
    form.addEventListener("input", clearSaved);
    form.addEventListener("click", function (ev) { if (ev.target.closest("button.replace, button.clear, button.remove-key")) clearSaved(); });
  }

  function lines(v) {
    return v.split("\n").map(function (s) { return s.trim(); }).filter(function (s) { return s !== ""; });
  }

  function mapOf(v) {
    const m = {};
    lines(v).forEach(function (l) {
      const i = l.indexOf("=");
      if (i < 0) m[l] = "";
      else m[l.slice(0, i)] = l.slice(i + 1);
    });
    return m;
  }

  // configOf reads the config fields of the editor, by the schema's types.
  function configOf() {
    const cfg = {};
    form.querySelectorAll(".field[data-field]").forEach(function (f) {
      const name = f.dataset.field, type = f.dataset.type, kind = f.dataset.kind;
      const el = document.getElementById("cfg-" + name);
      if (kind === "secret") {
        if (f.dataset.clear) return;
        if (f.dataset.ref && !f.dataset.replace) { cfg[name] = JSON.parse(f.dataset.ref); return; }
        if (el.value !== "") cfg[name] = el.value;
        return;
      }
      if (kind === "secret_map") {
        // The stored keys keep their references (never a value), less the
        // removed ones; pasted lines add keys or replace their values.
        const m = f.dataset.refs ? JSON.parse(f.dataset.refs) : {};
        f.querySelectorAll("li[data-removed]").forEach(function (li) { delete m[li.dataset.key]; });
        Object.assign(m, mapOf(el.value));
        if (Object.keys(m).length) cfg[name] = m;
        return;
      }
      if (type === "bool") { cfg[name] = el.checked; return; }
      const v = el.value.trim();
      if (v === "") return;
      switch (type) {
        case "int": cfg[name] = /^-?\d+$/.test(v) ? Number(v) : v; break;
        case "list": cfg[name] = lines(el.value); break;
        case "map": cfg[name] = mapOf(el.value); break;
        default: cfg[name] = v;
      }
    });
    return cfg;
  }

  function clearErrors() {
    form.querySelectorAll("[data-error-for]").forEach(function (p) { p.textContent = ""; });
    const fe = document.getElementById("form-error");
    fe.hidden = true;
    fe.textContent = "";
  }

  // showError puts the API's error next to its field, or at the form's top.
  function showError(res) {
    const e = errOf(res);
    const fe = document.getElementById("form-error");
    if (res.status === 412) {
      fe.innerHTML = "";
      fe.append("changed by someone else: ");
      const a = document.createElement("a");
      a.href = window.location.href;
      a.id = "reload";
      a.textContent = "reload";
      fe.append(a);
      fe.append(" to see the saved version, then edit again.");
      fe.hidden = false;
      return;
    }
    // The slot of the field, or of its parent (env.NAME goes to env,
    // config.env.KEY to config.env).
    let slot = null;
    for (let f = e.field || ""; f && !slot; f = f.includes(".") ? f.slice(0, f.lastIndexOf(".")) : "") {
      slot = form.querySelector('[data-error-for="' + CSS.escape(f) + '"]');
    }
    if (slot) {
      const f = slot.closest(".field");
      const missing = e.reason === "missing_credentials" ? "missing credentials: " : "";
      showFailure(slot, missing, e);
      const input = f && f.querySelector("input:not([hidden]), textarea:not([hidden]), select");
      if (input) input.setAttribute("aria-invalid", "true");
      // The field's group opens, and the focus goes to the field.
      const adv = slot.closest("details");
      if (adv) adv.open = true;
      const target = input || (f && f.querySelector("button, input, textarea, select"));
      if (target) target.focus();
    } else {
      showFailure(fe, "", e);
      fe.hidden = false;
      fe.setAttribute("tabindex", "-1");
      fe.focus();
    }
  }

  async function save() {
    clearErrors();
    const status = document.getElementById("save-status");
    const button = document.getElementById("save");
    button.disabled = true;
    setText(status, "Saving…");
    const body = {
      name: document.getElementById("f-name").value.trim(),
      description: document.getElementById("f-description").value.trim(),
      config: configOf(),
      // Sent whole: a line left out is removed.
      env: mapOf(document.getElementById("f-env").value),
      metadata: mapOf(document.getElementById("f-metadata").value),
    };
    let res;
    try {
      if (form.dataset.mode === "create") {
        body.driver = form.dataset.driver;
        res = await api("POST", "/api/v1/environments", body);
      } else {
        res = await api("PATCH", "/api/v1/environments/" + encodeURIComponent(form.dataset.env), body,
          { "If-Match": '"' + form.dataset.revision + '"' });
      }
    } catch (e) {
      res = { status: 0, body: { error: { code: "unreachable", message: "the server did not answer: " + e } } };
    }
    button.disabled = false;
    if (res.status === 200 || res.status === 201) {
      setText(status, "Saved (revision " + res.body.revision + ").");
      window.location.href = pageURL({ edit: res.body.id, saved: res.body.revision });
      return;
    }
    setText(status, "Not saved.");
    showError(res);
  }

  // ---- probes (UI-3) and provider health ----
  function platformText(p) { return p || "not measured"; }

  // probeWithProgress posts a probe asking for server-sent events: each
  // stage goes to onStage while it runs (the pending state), and it
  // resolves as api does, with the result or the error shape.
  async function probeWithProgress(path, onStage, body) {
    let r;
    try {
      r = await fetch(path, {
        method: "POST", credentials: "same-origin", body: JSON.stringify(body || {}),
        headers: { Accept: "text/event-stream", "Content-Type": "application/json", "X-CSRF-Token": await token() },
      });
    } catch (e) {
      return { status: 0, body: { error: { code: "unreachable", message: "the server did not answer: " + e } } };
    }
    if (!r.ok || !r.body || !(r.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
      const text = await r.text();
      let b = null;
      try { b = JSON.parse(text); } catch (e) { b = { error: { code: "unknown", message: text } }; }
      return { status: r.status, body: b };
    }
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      buf += chunk.value;
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        let ev = "", data = "";
        block.split("\n").forEach(function (l) {
          if (l.startsWith("event: ")) ev = l.slice(7);
          if (l.startsWith("data: ")) data += l.slice(6);
        });
        if (!data) continue;
        const v = JSON.parse(data);
        if (ev === "stage") onStage(v);
        if (ev === "result") return { status: 200, body: v };
        if (ev === "error") return { status: 500, body: v };
      }
    }
    return { status: 0, body: { error: { code: "unreachable", message: "the probe's stream ended without a result" } } };
  }

  // showResult writes a probe result apart: the connection in one
  // sentence, the qualification on its own line, what the probe did not
  // validate, and the summary and each stage behind "Details".
  function showResult(out, r) {
    const q = r.qualificationDiagnostic;
    const qual = r.platformQualificationRecorded ? "qualification recorded"
      : "no qualification recorded" + (q ? ": " + q.message + " (" + q.code + ")" : "");
    const conn = r.ok
      ? sentence("probe-connection", "Reached " + r.target + ": cwd " + r.cwd + ", platform " + platformText(r.platform) + ".")
      : sentence("probe-connection", "Failed (" + r.code + "): " + (r.message || r.summary));
    const parts = [conn, " ", sentence("probe-qualification", qual + ".")];
    if (r.notValidated) parts.push(" ", sentence("probe-not-validated", r.notValidated));
    const lines = [r.summary || ""];
    (r.stages || []).forEach(function (st) {
      lines.push(st.name + ": " + (st.skipped ? "skipped" : st.ok ? "ok" : "failed") + (st.error ? ": " + st.error : ""));
    });
    if (q && q.detail) lines.push("qualification: " + q.detail);
    parts.push(details(lines.join("\n")));
    out.className = "result " + (r.ok ? "ok" : "failed");
    out.replaceChildren.apply(out, parts);
  }

  // Test before saving: the create form's config as a draft probe,
  // nothing saved (a secret must be pasted: a draft holds no reference).
  const draftButton = document.getElementById("draft-test");
  if (draftButton) {
    draftButton.addEventListener("click", async function () {
      const out = document.getElementById("draft-result");
      draftButton.disabled = true;
      out.className = "result pending";
      setText(out, "Testing the unsaved settings…");
      const res = await probeWithProgress(companyPath("/probes"), function (st) {
        setText(out, "Testing the unsaved settings… " + st.name + (st.running ? " running" : st.ok ? " ok" : st.skipped ? " skipped" : " failed"));
      }, { driver: form.dataset.driver, config: configOf() });
      draftButton.disabled = false;
      if (res.status !== 200) {
        out.className = "result failed";
        showFailure(out, "Test failed: ", errOf(res));
        return;
      }
      showResult(out, res.body);
    });
  }

  document.querySelectorAll("button.test").forEach(function (b) {
    b.addEventListener("click", async function () {
      const id = b.dataset.env;
      const out = document.getElementById("result-" + id);
      b.disabled = true;
      out.className = "result pending";
      setText(out, "Testing…");
      const res = await probeWithProgress(companyPath("/environments/" + encodeURIComponent(id) + "/probe"), function (st) {
        setText(out, "Testing… " + st.name + (st.running ? " running" : st.ok ? " ok" : st.skipped ? " skipped" : " failed"));
      });
      b.disabled = false;
      if (res.status !== 200) {
        out.className = "result failed";
        showFailure(out, "Test failed: ", errOf(res));
        return;
      }
      const r = res.body;
      showResult(out, r);
      if (!r.ok && r.code === "host_key_unknown") offerTrust(out, id);
      refreshState(id);
    });
  });

  // offerTrust adds the fix for an unknown host key to a row's result:
  // "Trust host key…" scans the key the server offers and shows its
  // fingerprint; only "Trust this key" saves it (the server scans again
  // and refuses a key that changed meanwhile), at the row's revision.
  function offerTrust(out, id) {
    if (!document.querySelector("button.test")) return;
    const b = document.createElement("button");
    b.type = "button";
    b.className = "trust-key";
    b.textContent = "Trust host key…";
    const panel = document.createElement("div");
    panel.className = "trust-panel";
    panel.setAttribute("role", "status");
    panel.setAttribute("aria-live", "polite");
    b.addEventListener("click", async function () {
      b.disabled = true;
      setText(panel, "Reading the host key…");
      const res = await api("POST", "/api/v1/environments/" + encodeURIComponent(id) + "/host-key/scan");
      b.disabled = false;
      if (res.status !== 200) {
        showFailure(panel, "Could not read the host key: ", errOf(res));
        return;
      }
      const sc = res.body;
      const fp = document.createElement("code");
      fp.className = "fingerprint";
      fp.textContent = sc.fingerprint;
      const said = sentence("sentence", "");
      said.append("The host " + sc.host + ":" + sc.port + " offers the key ", fp,
        sc.trusted ? ". This environment trusts it already: Test again." : ". Compare it with the server's own fingerprint before you trust it.");
      if (sc.trusted) { panel.replaceChildren(said); return; }
      const yes = document.createElement("button");
      yes.type = "button";
      yes.className = "trust-confirm";
      yes.textContent = "Trust this key";
      const no = document.createElement("button");
      no.type = "button";
      no.className = "trust-cancel";
      no.textContent = "Cancel";
      no.addEventListener("click", function () { panel.replaceChildren(sentence("sentence", "Not trusted; nothing was saved.")); b.focus(); });
      yes.addEventListener("click", async function () {
        yes.disabled = true;
        const row = document.querySelector('tr[data-env="' + id + '"]');
        const r = await api("POST", "/api/v1/environments/" + encodeURIComponent(id) + "/host-key/trust",
          { fingerprint: sc.fingerprint }, { "If-Match": '"' + row.dataset.revision + '"' });
        if (r.status !== 200) {
          yes.disabled = false;
          showFailure(panel, "The key was not saved: ", errOf(r));
          return;
        }
        row.dataset.revision = r.body.revision;
        panel.replaceChildren(sentence("sentence", "Saved — revision " + r.body.revision + ": the key " + sc.fingerprint + " is trusted. Test again."));
        b.remove();
      });
      panel.replaceChildren(said, yes, " ", no);
      yes.focus();
    });
    out.append(b, panel);
  }
  document.querySelectorAll('td.result[data-code="host_key_unknown"]').forEach(function (td) {
    offerTrust(td, td.closest("tr").dataset.env);
  });

  // refreshState re-reads the row's state after a Test: the library
  // stored it as the company's last Test, so the badge says what a
  // reload would ("failing since 10:42 UTC", "ready — not qualified").
  async function refreshState(id) {
    const row = document.querySelector('tr[data-env="' + id + '"]');
    const badge = row && row.querySelector("td.state .badge");
    if (!badge || badge.classList.contains("status-muted") || row.querySelector("td.state .reason")) return;
    const res = await api("GET", companyPath("/environments/" + encodeURIComponent(id) + "/qualification"));
    if (res.status !== 200) return;
    const lt = res.body.lastTest;
    let words = "ready", tone = "ok";
    if (lt && !lt.ok) {
      words = "failing since " + clockOf(new Date(lt.failingSince || lt.at));
      tone = "bad";
    } else if (!row.dataset.host && !res.body.qualified) {
      words = "ready — not qualified";
      tone = "warn";
    }
    if (words === "ready" && badge.textContent.startsWith("ready")) return;
    badge.textContent = words;
    badge.className = "badge status-" + tone;
  }

  // clockOf is a time of day in UTC, as the server writes it.
  function clockOf(d) {
    const p = function (n) { return String(n).padStart(2, "0"); };
    const now = new Date();
    const day = d.getUTCFullYear() === now.getUTCFullYear() && d.getUTCMonth() === now.getUTCMonth() && d.getUTCDate() === now.getUTCDate();
    const months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    return (day ? "" : months[d.getUTCMonth()] + " " + d.getUTCDate() + " ") + p(d.getUTCHours()) + ":" + p(d.getUTCMinutes()) + " UTC";
  }

  document.querySelectorAll("button.health").forEach(function (b) {
    b.addEventListener("click", async function () {
      const id = b.dataset.env;
      const out = document.getElementById("result-" + id);
      b.disabled = true;
      out.className = "result pending";
      setText(out, "Checking the provider…");
      const res = await api("POST", "/api/v1/environments/" + encodeURIComponent(id) + "/health");
      b.disabled = false;
      if (res.status !== 200) {
        out.className = "result failed";
        showFailure(out, "Check failed: ", errOf(res));
        return;
      }
      const h = res.body;
      out.className = "result " + (h.status === "available" ? "ok" : "failed");
      const said = [sentence("sentence", "Provider " + (h.endpoint || "") + ": " + h.status + ".")];
      if (h.reason) said.push(details(h.reason));
      out.replaceChildren.apply(out, said);
    });
  });

  // ---- pin an image field to its digest (asks the registry) ----
  document.querySelectorAll("button.pin").forEach(function (b) {
    b.addEventListener("click", async function () {
      const input = document.getElementById("cfg-" + b.dataset.for);
      const out = document.getElementById("pin-" + b.dataset.for);
      const ref = input.value.trim();
      if (ref === "") {
        out.className = "status pin-status failed";
        setText(out, "Enter an image reference first, such as debian:bookworm.");
        input.focus();
        return;
      }
      b.disabled = true;
      out.className = "status pin-status pending";
      setText(out, "Asking the registry for the digest of " + ref + "…");
      const res = await api("POST", "/api/v1/images/pin", { reference: ref });
      b.disabled = false;
      if (res.status !== 200) {
        const e = errOf(res);
        out.className = "status pin-status failed";
        out.replaceChildren("Not pinned: " + e.message);
        if (e.detail) out.append(details(e.detail));
        return;
      }
      input.value = res.body.identity;
      out.className = "status pin-status ok";
      setText(out, res.body.identity === ref ? "Already pinned: it names a digest." :
        "Pinned " + ref + " to its digest" + (res.body.platform ? " for " + res.body.platform : "") + ". Save to keep it.");
    });
  });

  // ---- pick an image the provider keeps (Daytona's snapshots) ----
  document.querySelectorAll("button.pick-image").forEach(function (b) {
    b.addEventListener("click", async function () {
      const field = b.dataset.for;
      const out = document.getElementById("pick-status-" + field);
      const box = document.getElementById("picker-" + field);
      const sel = document.getElementById("pick-" + field);
      const body = form.dataset.mode === "create"
        ? { driver: form.dataset.driver, config: configOf() }
        : { environment: form.dataset.env };
      b.disabled = true;
      out.className = "status pick-status pending";
      setText(out, "Asking the provider for its images…");
      const res = await api("POST", "/api/v1/image-choices", body);
      b.disabled = false;
      if (res.status !== 200) {
        const e = errOf(res);
        out.className = "status pick-status failed";
        out.replaceChildren("Could not list them: " + e.message);
        if (e.detail && e.detail !== e.message) out.append(details(e.detail));
        return;
      }
      const items = res.body.items;
      sel.replaceChildren();
      items.forEach(function (it) {
        const o = document.createElement("option");
        o.value = it.value;
        o.textContent = it.name + " — " + it.state + (it.usable ? "" : " (not usable now)") + (it.source ? ", from " + it.source : "");
        o.title = it.value;
        o.disabled = !it.usable;
        sel.append(o);
      });
      box.hidden = items.length === 0;
      out.className = "status pick-status";
      setText(out, items.length === 0 ? "The provider keeps no images for this account." :
        items.length + " image" + (items.length === 1 ? "" : "s") + ", the most recently used first.");
      if (items.length) sel.focus();
    });
  });
  document.querySelectorAll("button.use-image").forEach(function (b) {
    b.addEventListener("click", function () {
      const field = b.dataset.for;
      const sel = document.getElementById("pick-" + field);
      const o = sel.options[sel.selectedIndex];
      if (!o || o.disabled) return;
      document.getElementById("cfg-" + field).value = o.value;
      document.getElementById("picker-" + field).hidden = true;
      const out = document.getElementById("pick-status-" + field);
      out.className = "status pick-status ok";
      setText(out, "Chose " + o.textContent.split(" — ")[0] + " (" + o.value + "). Save to keep it.");
    });
  });

  // timeOf is a <time> element for an ISO time: "just now", "N min ago"
  // or "N hours ago", the exact time on hover.
  function timeOf(iso) {
    const t = document.createElement("time");
    t.dateTime = iso;
    t.title = new Date(iso).toUTCString();
    const s = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
    t.textContent = s < 60 ? "just now" : s < 3600 ? Math.round(s / 60) + " min ago" : Math.round(s / 3600) + " hours ago";
    return t;
  }

  // ---- live leases: the Leases section, while shown, follows the
  // server's stream (one of the principal's stream slots, so only then) ----
  const leasesBody = document.querySelector("#leases-table tbody");
  const leasesSection = document.getElementById("leases");
  let leases = null;
  function followLeases() {
    const shown = leasesSection && !leasesSection.hidden;
    if (!shown && leases) { leases.close(); leases = null; }
    if (!shown || leases || !leasesBody || !window.EventSource) return;
    const names = {};
    document.querySelectorAll("tr[data-env]").forEach(function (tr) { names[tr.dataset.env] = tr.dataset.name; });
    leases = new EventSource(companyPath("/leases?live=true"));
    leases.addEventListener("leases", function (ev) {
      const items = JSON.parse(ev.data).items;
      leasesBody.replaceChildren();
      items.forEach(function (l) {
        const tr = leasesBody.insertRow();
        tr.dataset.lease = l.id;
        const id = tr.insertCell();
        id.className = "name";
        id.textContent = l.id;
        const cells = [["Environment", names[l.environment] || l.environment], ["Provider", l.provider]];
        cells.forEach(function (c) {
          const td = tr.insertCell();
          td.dataset.label = c[0];
          td.textContent = c[1];
        });
        const st = tr.insertCell();
        st.dataset.label = "Status";
        const badge = document.createElement("span");
        badge.className = "badge";
        badge.textContent = l.status;
        st.append(badge);
        const at = tr.insertCell();
        at.dataset.label = "Acquired";
        at.append(timeOf(l.acquiredAt));
      });
      if (items.length === 0) {
        const td = leasesBody.insertRow().insertCell();
        td.colSpan = 5;
        td.textContent = "No live leases.";
      }
      setText(document.querySelector("#leases-h .summary-note"), items.length + " live");
      setText(document.querySelector('nav.sections a[data-section="leases"] .count'), String(items.length));
    });
  }
  window.addEventListener("hashchange", followLeases);
  window.addEventListener("pagehide", function () { if (leases) { leases.close(); leases = null; } });
  followLeases();

  // ---- archive and restore, at the row's revision ----
  document.querySelectorAll("button.archive, button.restore").forEach(function (b) {
    b.addEventListener("click", function () {
      if (b.classList.contains("restore")) { send(); return; }
      const name = b.closest("tr").dataset.name;
      confirmFirst(b, "Archive " + name + "? It is kept for history, but it cannot be assigned or leased until it is restored, and its warm pool is emptied. Leases already running go on.",
        "Archive " + name, send);
    });
    async function send() {
      const id = b.dataset.env;
      const verb = b.classList.contains("archive") ? "archive" : "restore";
      const rev = b.closest("tr").dataset.revision;
      const out = document.getElementById("result-" + id);
      b.disabled = true;
      out.className = "result pending";
      setText(out, verb === "archive" ? "Archiving…" : "Restoring…");
      const res = await api("POST", "/api/v1/environments/" + encodeURIComponent(id) + "/" + verb, undefined,
        { "If-Match": '"' + rev + '"' });
      b.disabled = false;
      if (res.status === 200) { window.location.reload(); return; }
      const e = errOf(res);
      out.className = "result failed";
      setText(out, (res.status === 412 ? "changed by someone else: reload, then " + verb + " again"
        : "Not " + (verb === "archive" ? "archived" : "restored") + ": " + e.message) + " (" + (e.reason || e.code) + ")");
    }
  });

  // ---- delete with its blast radius first (UI-5) ----
  const panel = document.getElementById("delete-panel");
  let pending = null;
  document.querySelectorAll("button.delete").forEach(function (b) {
    b.addEventListener("click", async function () {
      const id = b.dataset.env;
      const res = await api("GET", "/api/v1/environments/" + encodeURIComponent(id) + "/blast-radius");
      const out = document.getElementById("result-" + id);
      if (res.status !== 200) {
        const e = errOf(res);
        setText(out, "Cannot delete: " + e.message);
        return;
      }
      const br = res.body;
      pending = { id: id, revision: br.revision };
      setText(document.getElementById("delete-name"), br.environmentName);
      const box = document.getElementById("delete-radius");
      box.innerHTML = "";
      const ul = document.createElement("ul");
      const add = function (label, refs) {
        const li = document.createElement("li");
        const n = (refs || []).length;
        li.textContent = label + ": " + n + (n ? " (" + refs.map(function (r) { return r.detail || r.id; }).join(", ") + ")" : "");
        ul.append(li);
      };
      add("bindings", br.assignments);
      add("active leases", br.activeLeases);
      add("reusable leases", br.reusableLeases);
      add("leases pending cleanup", br.pendingCleanupLeases);
      add("setup sessions", br.setupSessions);
      const li = document.createElement("li");
      const qres = await api("GET", companyPath("/environments/" + encodeURIComponent(id) + "/qualification"));
      li.textContent = "qualification in " + company + ": " + (qres.status !== 200 ? "unknown (" + errOf(qres).message + ")"
        : qres.body.qualified ? "recorded (" + qres.body.platform + "), no longer used once deleted" : "none (" + qres.body.code + ")");
      ul.append(li);
      box.append(ul);
      const confirm = document.getElementById("delete-confirm");
      const why = (br.protected ? [br.protected] : []).concat(br.blockers || []);
      if (why.length) {
        const p = document.createElement("p");
        p.className = "error";
        p.id = "delete-blockers";
        p.textContent = "It cannot be deleted now: " + why.join("; ");
        box.append(p);
        confirm.disabled = true;
      } else {
        confirm.disabled = false;
      }
      setText(document.getElementById("delete-status"), "");
      panel.hidden = false;
      (confirm.disabled ? document.getElementById("delete-cancel") : confirm).focus();
    });
  });
  if (panel) {
    document.getElementById("delete-cancel").addEventListener("click", function () { panel.hidden = true; pending = null; });
    document.getElementById("delete-confirm").addEventListener("click", async function () {
      if (!pending) return;
      const res = await api("DELETE", "/api/v1/environments/" + encodeURIComponent(pending.id), undefined,
        { "If-Match": '"' + pending.revision + '"' });
      if (res.status === 200) { window.location.href = pageURL({}); return; }
      showFailure(document.getElementById("delete-status"), "Not deleted: ", errOf(res));
    });
  }

  // ---- instance settings ----
  const sform = document.getElementById("settings-form");
  if (sform) {
    sform.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const st = document.getElementById("settings-status");
      setText(st, "Saving…");
      const res = await api("PATCH", "/api/v1/settings", {
        enableEnvironments: document.getElementById("set-enable").checked,
        enableManagedSandboxOnly: document.getElementById("set-managed").checked,
        quotaPerCompany: parseInt(document.getElementById("set-quota-company").value, 10),
        quotaPerCompanyEnvironment: parseInt(document.getElementById("set-quota-env").value, 10),
      }, { "If-Match": '"' + sform.dataset.revision + '"' });
      if (res.status === 200) { window.location.reload(); return; }
      const e = errOf(res);
      if (res.status === 412) {
        st.replaceChildren("Not saved: changed by someone else: ");
        const a = document.createElement("a");
        a.href = window.location.pathname + window.location.search + "#settings";
        a.id = "settings-reload";
        a.textContent = "reload";
        a.addEventListener("click", function (ev) { ev.preventDefault(); window.location.reload(); });
        st.append(a, " to see the saved settings, then change them again.");
        return;
      }
      showFailure(st, "Not saved: ", e);
    });
  }

  // ---- assignments and resolution (UI-5) ----
  const bform = document.getElementById("bind-form");
  if (bform) {
    bform.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const kind = document.getElementById("bind-kind").value;
      const key = document.getElementById("bind-key").value.trim();
      const st = document.getElementById("bind-status");
      if (!key) { setText(st, "The id is required."); return; }
      setText(st, "Saving…");
      const res = await api("PUT", companyPath("/assignments/" + encodeURIComponent(kind) + "/" + encodeURIComponent(key)),
        { environmentId: document.getElementById("bind-env").value }, { "If-Match": "*" });
      if (res.status === 200) { window.location.reload(); return; }
      showFailure(st, "Not assigned: ", errOf(res));
    });
  }
  const rform = document.getElementById("resolve-form");
  if (rform) {
    rform.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const out = document.getElementById("resolve-result");
      setText(out, "Resolving…");
      const body = {};
      ["workspace", "project", "agent"].forEach(function (k) {
        const v = document.getElementById("res-" + k).value.trim();
        if (v) body[k] = v;
      });
      const res = await api("POST", companyPath("/resolve"), body);
      if (res.status !== 200) {
        showFailure(out, "No target: ", errOf(res));
        return;
      }
      const r = res.body;
      const b = r.binding;
      setText(out, "A run resolves to " + r.environment.name + " (" + r.environment.driver + "), by the " +
        b.kind.replace("_", " ") + " binding" + (b.key ? " " + b.key : "") + ".");
    });
  }

  // ---- runs (UI-5) ----
  const runForm = document.getElementById("run-form");
  let runID = null, source = null, runPoll = null;
  // The run's status (starting, running, …) is read every second until
  // it ends; its output streams meanwhile.
  function pollRun(id) {
    if (runPoll) clearInterval(runPoll);
    runPoll = setInterval(async function () {
      const res = await api("GET", companyPath("/runs/" + encodeURIComponent(id)));
      if (runID !== id) return;
      if (res.status === 200) showRun(res.body);
      if (res.status !== 200 || res.body.endedAt) { clearInterval(runPoll); runPoll = null; }
    }, 1000);
  }
  let runEnded = "";
  function showRun(v) {
    // A read that was in flight when the run ended does not undo its end.
    if (runEnded === v.id && !v.endedAt) return;
    if (v.endedAt) runEnded = v.id;
    setText(document.getElementById("run-status"), v.status + (v.leaseId ? " on lease " + v.leaseId : "") +
      (v.error ? ": " + v.error.message : ""));
    if (v.exit) {
      const x = v.exit;
      setText(document.getElementById("run-exit"), (x.signal && x.code < 0 ? "killed by signal " + x.signal + " (no exit status)"
        : "exit status " + x.code + (x.signal ? " (signal " + x.signal + ")" : "")) +
        (x.timed_out ? " (time limit)" : "") + (x.truncated ? " (output truncated)" : ""));
    }
    const proofs = v.proofs || [];
    setText(document.getElementById("run-proof"), proofs.length
      ? proofs.map(function (p) { return "task " + p.task_id + ": " + (p.complete ? "complete" : "incomplete") + ", evidence " + p.evidence; }).join("; ")
      : (v.endedAt ? "none: the task ended on its own" : ""));
    const l = v.receipt;
    if (l) {
      setText(document.getElementById("run-receipt"), "lease " + l.id + " on " + l.provider +
        (l.providerLeaseId ? " (" + l.providerLeaseId + ")" : "") + ", environment " + l.environment +
        ": " + l.status + ", cleanup " + (l.cleanup || "none") + (l.cleanupEvidenceKind ? " by " + l.cleanupEvidenceKind : "") +
        (l.cleanupEvidence ? " (" + l.cleanupEvidence + ")" : ""));
    } else if (v.held && v.endedAt) {
      setText(document.getElementById("run-receipt"), "none: lease " + v.leaseId + " is kept for the next run (release it through the API)");
    }
    if (v.endedAt) document.getElementById("run-stop").disabled = true;
    if (v.endedAt && v.held && v.leaseId) showFiles(v.leaseId);
  }

  // ---- the files of a held run's lease (…/leases/{id}/files) ----
  // filesWS is the workspace the tree is of ("" for the working directory).
  let filesLease = null, filesWS = "";
  function filesPath(lease, path, archive) {
    return companyPath("/leases/" + encodeURIComponent(lease) + "/files?path=" + encodeURIComponent(path) + (archive ? "&archive=1" : "") +
      (filesWS ? "&workspace=" + encodeURIComponent(filesWS) : ""));
  }
  function filesError(e) {
    const el = document.getElementById("files-error");
    if (!el) return;
    showFailure(el, "", e);
    el.hidden = false;
  }
  // listDir fills ul with the entries of the directory path: a directory
  // is a <details> listed when it is opened, a file has view and download.
  async function listDir(lease, path, ul) {
    const res = await api("GET", filesPath(lease, path));
    if (res.status !== 200) { filesError(errOf(res)); return; }
    ul.replaceChildren();
    (res.body.entries || []).forEach(function (f) {
      const li = document.createElement("li");
      const full = path === "." ? f.name : path + "/" + f.name;
      li.dataset.path = full;
      const dl = document.createElement("a");
      dl.href = filesPath(lease, full, true);
      dl.textContent = "download";
      dl.setAttribute("download", f.name + ".tar");
      // Go's fs.FileMode: the directory bit is 1<<31, the link bit 1<<27.
      if ((f.mode >>> 31) & 1) {
        const d = document.createElement("details");
        const sum = document.createElement("summary");
        sum.textContent = f.name + "/ ";
        sum.append(dl);
        const sub = document.createElement("ul");
        d.append(sum, sub);
        d.addEventListener("toggle", function () { if (d.open && !sub.childElementCount) listDir(lease, full, sub); });
        li.append(d);
      } else if ((f.mode >>> 27) & 1) {
        li.textContent = f.name + " -> " + (f.linkTarget || "") + " ";
        li.append(dl);
      } else {
        const view = document.createElement("button");
        view.type = "button";
        view.textContent = "view";
        view.addEventListener("click", function () { viewFile(lease, full); });
        li.textContent = f.name + " (" + f.size + " bytes) ";
        li.append(view, " ", dl);
      }
      ul.append(li);
    });
    if (!ul.childElementCount) {
      const li = document.createElement("li");
      li.textContent = "(empty)";
      ul.append(li);
    }
  }
  // viewFile shows the first 64 KiB of a file as text: it reads the tar
  // stream of the file only as far as its first entry's first 64 KiB.
  async function viewFile(lease, path) {
    const pre = document.getElementById("files-view");
    const r = await fetch(filesPath(lease, path, true), { credentials: "same-origin", headers: { Accept: "application/x-tar" } });
    if (r.status !== 200) {
      let e = { code: "unknown", message: "HTTP " + r.status };
      try { e = (await r.json()).error || e; } catch (x) { /* not JSON */ }
      filesError(e);
      return;
    }
    const limit = 65536, reader = r.body.getReader();
    let buf = new Uint8Array(0), text = null;
    const octal = function (b, off, n) { return parseInt(new TextDecoder().decode(b.subarray(off, off + n)).replace(/\0.*$/, "").trim() || "0", 8); };
    for (;;) {
      // Walk the headers (PAX and GNU long-name records skipped) to the
      // first regular file's data.
      let off = 0;
      while (text === null && buf.length >= off + 512) {
        const size = octal(buf, off + 124, 12), type = String.fromCharCode(buf[off + 156]);
        const data = off + 512;
        if (type === "0" || type === "\0") {
          const want = Math.min(size, limit);
          if (buf.length >= data + want) text = new TextDecoder().decode(buf.subarray(data, data + want)) + (size > limit ? "\n… (first 64 KiB of " + size + " bytes)" : "");
          break;
        }
        off = data + Math.ceil(size / 512) * 512;
      }
      if (text !== null) break;
      const chunk = await reader.read();
      if (chunk.done) break;
      const n = new Uint8Array(buf.length + chunk.value.length);
      n.set(buf); n.set(chunk.value, buf.length);
      buf = n;
      if (buf.length > 4 * limit + (1 << 20)) break; // a header this long is not one
    }
    reader.cancel().catch(function () {});
    pre.textContent = text === null ? "(not a regular file)" : text;
    pre.dataset.path = path;
    pre.hidden = false;
  }
  // showTree lists the tree of the workspace ws ("" for the lease's
  // working directory).
  function showTree(lease, ws, key) {
    filesWS = ws;
    setText(document.getElementById("files-where"), ws ? "The files of workspace " + key + " (" + ws + "):" : "The lease's working directory:");
    document.getElementById("files-view").hidden = true;
    listDir(lease, ".", document.getElementById("files-tree"));
  }
  function checkpointText(c) {
    const parts = [];
    if (c && c.commit) parts.push("commit " + c.commit);
    if (c && c.tree) parts.push("tree " + c.tree);
    return parts.length ? parts.join(", ") : "none";
  }
  // showWorkspaces shows the lease's live workspaces (…/workspace): the
  // source, the checkpoint, what changed since it (a download of the
  // changed files), and a button to browse each; the tree shows the one
  // live workspace when there is exactly one.
  async function showWorkspaces(lease) {
    const box = document.getElementById("files-workspaces");
    box.replaceChildren();
    const res = await api("GET", companyPath("/leases/" + encodeURIComponent(lease) + "/workspace"));
    if (res.status !== 200) { filesError(errOf(res)); showTree(lease, "", ""); return; }
    const live = (res.body.workspaces || []).filter(function (v) { return v.workspace.state !== "ended"; });
    const line = function (label, text) {
      const p = document.createElement("p");
      const b = document.createElement("strong");
      b.textContent = label + ": ";
      const c = document.createElement("code");
      c.textContent = text;
      p.append(b, c);
      return p;
    };
    live.forEach(function (v) {
      const w = v.workspace, div = document.createElement("div");
      div.className = "workspace";
      div.dataset.ws = w.id;
      const h = document.createElement("p");
      h.textContent = "Workspace " + w.key + " (" + w.id + "), " + w.state + ", from " + w.source.kind +
        (w.source.location ? " " + w.source.location : "") + (w.source.ref ? " @ " + w.source.ref : "") +
        ", of " + w.company + (w.project ? " / " + w.project : "");
      div.append(h, line("Checkpoint", checkpointText(w.checkpoint)));
      const ch = v.changes;
      if (ch) {
        const changed = line("Changed since the checkpoint", (ch.changed || []).join(" ") || "nothing");
        changed.classList.add("ws-changed");
        if ((ch.changed || []).length) {
          const dl = document.createElement("a");
          dl.href = companyPath("/leases/" + encodeURIComponent(lease) + "/workspace/" + encodeURIComponent(w.id) + "/changes");
          dl.textContent = "download the changed files";
          dl.setAttribute("download", w.key + "-changes.tar");
          changed.append(" ", dl);
        }
        div.append(changed, line("Deleted", (ch.deleted || []).join(" ") || "nothing"));
        if (ch.head && ch.head.commit && ch.head.commit !== (w.checkpoint || {}).commit) div.append(line("Head", checkpointText(ch.head)));
      } else if (v.changesError) {
        div.append(line("Changes", "not read: " + v.changesError));
      }
      const browse = document.createElement("button");
      browse.type = "button";
      browse.textContent = "browse its files";
      browse.addEventListener("click", function () { showTree(lease, w.id, w.key); });
      div.append(browse);
      box.append(div);
    });
    if (live.length) {
      const wd = document.createElement("button");
      wd.type = "button";
      wd.textContent = "browse the lease's working directory";
      wd.addEventListener("click", function () { showTree(lease, "", ""); });
      box.append(wd);
    }
    if (live.length === 1) showTree(lease, live[0].workspace.id, live[0].workspace.key);
    else showTree(lease, "", "");
  }
  function showFiles(lease) {
    const panel = document.getElementById("files-panel");
    if (!panel || filesLease === lease) return;
    filesLease = lease;
    panel.hidden = false;
    setText(document.getElementById("files-lease"), lease);
    document.getElementById("files-error").hidden = true;
    document.getElementById("files-view").hidden = true;
    showWorkspaces(lease);
  }
  if (runForm) {
    runForm.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const errEl = document.getElementById("run-error");
      errEl.hidden = true;
      if (source) { source.close(); source = null; }
      // The last run's poll may have a read in flight: with runID cleared
      // its answer is dropped (pollRun), so it cannot write that run's
      // exit into the fields cleared below while this run starts.
      if (runPoll) { clearInterval(runPoll); runPoll = null; }
      runID = null;
      const body = { argv: ["sh", "-c", document.getElementById("run-cmd").value] };
      const target = document.getElementById("run-target").value;
      const ws = document.getElementById("run-workspace").value.trim();
      if (target) body.environmentId = target;
      if (ws) body.workspace = ws;
      if (document.getElementById("run-hold").checked) body.hold = true;
      filesLease = null;
      const t = document.getElementById("run-timeout").value.trim();
      if (t) body.timeoutSeconds = /^\d+$/.test(t) ? Number(t) : t;
      ["run-output", "run-exit", "run-proof", "run-receipt"].forEach(function (id) { setText(document.getElementById(id), ""); });
      setText(document.getElementById("run-status"), "starting…");
      const archive = document.getElementById("run-archive");
      const project = archive && archive.files.length ? archive.files[0] : null;
      if (project) {
        // The project goes in first: a held lease (a run of true), the
        // archive prepared as the workspace in it, then the command in
        // that lease, which runs in the workspace (all through the API).
        const fail = function (e) {
          showFailure(errEl, "", e);
          errEl.hidden = false;
          setText(document.getElementById("run-status"), "not started");
        };
        if (!ws) return fail({ code: "invalid", message: "Name the workspace the project goes into." });
        setText(document.getElementById("run-status"), "preparing the workspace…");
        const first = Object.assign({}, body, { argv: ["true"], hold: true });
        let r = await api("POST", companyPath("/runs"), first, { "Idempotency-Key": "page-" + Date.now() + "-" + Math.random() });
        if (r.status !== 202) return fail(errOf(r));
        while (r.status === 200 || r.status === 202) {
          if (r.body.status !== "running" && r.body.status !== "starting") break;
          await new Promise(function (done) { setTimeout(done, 200); });
          r = await api("GET", companyPath("/runs/" + encodeURIComponent(r.body.id)));
        }
        if (r.status !== 200 && r.status !== 202) return fail(errOf(r));
        if (!r.body.leaseId || r.body.status !== "exited") return fail(r.body.error || { code: "unknown", message: "The run that leases the workspace ended " + r.body.status + "." });
        const lease = r.body.leaseId;
        const put = await fetch(companyPath("/leases/" + encodeURIComponent(lease) + "/workspace") +
          "?key=" + encodeURIComponent(ws) + "&name=" + encodeURIComponent(project.name), {
          method: "POST", credentials: "same-origin", body: project,
          headers: { "Content-Type": "application/x-tar", Accept: "application/json", "X-CSRF-Token": await token() } });
        if (put.status !== 200) {
          let e = { code: "unknown", message: "HTTP " + put.status };
          try { e = (await put.json()).error || e; } catch (x) { /* not JSON */ }
          return fail(e);
        }
        body.leaseId = lease;
        ["environmentId", "workspace", "project", "agent", "hold"].forEach(function (k) { delete body[k]; });
      }
      const res = await api("POST", companyPath("/runs"), body, { "Idempotency-Key": "page-" + Date.now() + "-" + Math.random() });
      if (res.status !== 202) {
        showFailure(errEl, "", errOf(res));
        errEl.hidden = false;
        setText(document.getElementById("run-status"), "not started");
        return;
      }
      runID = res.body.id;
      showRun(res.body);
      document.getElementById("run-stop").disabled = false;
      pollRun(runID);
      const out = document.getElementById("run-output");
      source = new EventSource(companyPath("/runs/" + encodeURIComponent(runID) + "/output?from=0"));
      source.addEventListener("output", function (m) { out.append(JSON.parse(m.data).text); });
      source.addEventListener("end", function (m) { showRun(JSON.parse(m.data)); source.close(); source = null; });
      source.addEventListener("error", function (m) {
        if (m.data) {
          const e = JSON.parse(m.data).error;
          setText(document.getElementById("run-status"), "output failed: " + e.message);
        }
        if (source) { source.close(); source = null; }
      });
    });
    document.getElementById("run-stop").addEventListener("click", async function () {
      if (!runID) return;
      setText(document.getElementById("run-status"), "stopping…");
      const res = await api("POST", companyPath("/runs/" + encodeURIComponent(runID) + "/stop"));
      if (res.status === 200) showRun(res.body);
    });
  }
  // ---- images (UI-4) and the terminal ----
  const imgPanel = document.getElementById("images-panel");
  if (imgPanel && imgPanel.dataset.capture === "true") {
    const envID = imgPanel.dataset.env;
    const act = imgPanel.dataset.act === "true";
    const envPath = "/api/v1/environments/" + encodeURIComponent(envID);
    let ses = null;      // the session shown
    let termFailed = false; // the terminal's last connect failed (its reason stays in view)
    let cursor = 0;      // its events cursor
    let poll = null;

    const when = timeOf;

    async function loadActive() {
      const res = await api("GET", envPath);
      if (res.status !== 200) return;
      const at = res.body.activeTemplate;
      // The name (or, with none active, what that means) in words; the id
      // beside it in the id's style.
      setText(document.getElementById("active-name"), at ? names[at.id] || "" : "none (leases start from the configured image)");
      setText(document.getElementById("active-id"), at ? at.id : "");
      const d = document.getElementById("drift");
      d.dataset.drift = at ? at.drift : "none";
      setText(d, d.dataset.drift);
      // What the drift means and what to do, beside it.
      ["relinked", "detached"].forEach(function (k) {
        const note = document.getElementById("drift-note-" + k);
        if (note) note.hidden = d.dataset.drift !== k;
      });
      // Detached: the image, target or account changed since the active
      // template's capture, so it and every template captured from the
      // same source can only fail to be promoted or rolled back to: those
      // controls are off, and the row says why.
      const activeRow = at ? document.querySelector('#templates tr[data-template="' + at.id + '"]') : null;
      const stale = at && at.drift === "detached" && activeRow ? activeRow.dataset.source : null;
      document.querySelectorAll("#templates tr[data-template]").forEach(function (tr) {
        const blocked = stale !== null && stale !== "" && tr.dataset.source === stale;
        const acts = tr.querySelectorAll("button.promote, button.rollback");
        acts.forEach(function (b) { b.disabled = blocked; });
        let why = tr.querySelector(".why-not");
        if (blocked && acts.length && !why) {
          why = document.createElement("p");
          why.className = "why-not help";
          why.textContent = "Cannot be promoted again: the environment's image, target or account changed since this capture. Capture a new template.";
          tr.querySelector(".tpl-state").append(why);
        } else if (!blocked && why) {
          why.remove();
        }
      });
    }

    async function templateAction(id, verb, body) {
      const st = document.getElementById("templates-status");
      setText(st, verb + " " + id + "…");
      const res = await api("POST", "/api/v1/templates/" + encodeURIComponent(id) + "/" + verb, body);
      if (res.status !== 200) {
        const e = errOf(res);
        setText(st, verb + " failed: " + e.message);
        return;
      }
      setText(st, verb + ": " + id + " is " + res.body.state);
      await loadTemplates();
    }

    let renderedKey = "";
    const names = {}; // template id -> name, from the last list
    async function loadTemplates() {
      const tb = document.querySelector("#templates tbody");
      const [tl, hl] = await Promise.all([api("GET", envPath + "/templates"), api("GET", envPath + "/template-history")]);
      if (tl.status !== 200) {
        tb.replaceChildren();
        setText(document.getElementById("templates-status"), "templates: " + errOf(tl).message);
        return;
      }
      // Unchanged lists keep their rows (a click in flight is not lost to
      // a redraw).
      const key = JSON.stringify([tl.body.items, hl.status === 200 ? hl.body.items : null]);
      if (key === renderedKey) { await loadActive(); return; }
      renderedKey = key;
      tb.replaceChildren();
      if (tl.body.items.length === 0) {
        const tr = tb.insertRow();
        const td = tr.insertCell();
        td.colSpan = 4;
        td.textContent = "No templates yet.";
      }
      tl.body.items.forEach(function (t) {
        const tr = tb.insertRow();
        tr.dataset.template = t.id;
        tr.dataset.source = t.sourceFingerprint || "";
        // The name first; the id, which names it in the API and envctl,
        // small beside it and selectable for a copy.
        const nc = tr.insertCell();
        const nm = document.createElement("strong");
        nm.className = "tpl-name";
        nm.textContent = t.name || "unnamed";
        const tid = document.createElement("code");
        tid.className = "tpl-id";
        tid.title = "template id";
        tid.textContent = t.id;
        nc.append(nm, " ", tid);
        names[t.id] = t.name || "";
        const stc = tr.insertCell();
        stc.className = "tpl-state";
        stc.textContent = t.state + (t.failureReason ? ": " + t.failureReason : "") + (t.deleteNote ? " (" + t.deleteNote + ")" : "");
        tr.insertCell().append(when(t.createdAt));
        const ac = tr.insertCell();
        if (!act) return;
        function btn(label, cls, fn) {
          const b = document.createElement("button");
          b.type = "button";
          b.className = cls;
          b.textContent = label;
          b.setAttribute("aria-label", label + " " + (t.name || t.id));
          b.addEventListener("click", fn);
          ac.append(b, " ");
        }
        if (t.state === "captured") btn("Promote", "promote", function () { templateAction(t.id, "promote"); });
        if (t.state === "superseded") btn("Roll back", "rollback", function () { templateAction(t.id, "rollback"); });
        if (t.state !== "revoked" && t.state !== "deleted" && t.state !== "failed") {
          btn("Revoke", "revoke", function (ev) {
            const label = t.name || t.id;
            confirmFirst(ev.currentTarget, "Revoke " + label + "? It can never be promoted again. If it is the active template, new leases use the environment's configured image (not an earlier template); leases already running go on.",
              "Revoke " + label, function () { templateAction(t.id, "revoke", { reason: "revoked on the Environments page" }); });
          });
        }
      });
      const ol = document.getElementById("template-history");
      ol.replaceChildren();
      if (hl.status === 200) {
        hl.body.items.forEach(function (h) {
          const li = document.createElement("li");
          li.append(h.action + " " + (h.from || "none") + " → " + (h.to || "none") + " by " + h.actor + ", ", when(h.at));
          if (h.reason) li.append(": " + h.reason);
          ol.append(li);
        });
      }
      await loadActive();
    }

    const words = {
      starting: "starting: leasing the setup sandbox and running the steps",
      waiting_for_user: "waiting for you: use the terminal, then capture or cancel",
      capturing: "capturing the sandbox…",
      captured: "captured (not promoted)",
      promoted: "captured and promoted",
      cancelled: "cancelled",
      timed_out: "timed out",
      failed: "failed",
    };
    const activeStates = ["starting", "waiting_for_user", "capturing"];

    function showSession(s) {
      ses = s;
      document.getElementById("session").hidden = false;
      setText(document.getElementById("session-id"), s.id);
      const st = document.getElementById("session-state");
      st.dataset.state = s.state;
      st.textContent = (words[s.state] || s.state) + (s.failureReason ? ": " + s.failureReason : "") +
        (s.template ? "; template " + s.template : "") + (s.reused ? " (reused: nothing was built)" : "");
      const ctl = document.getElementById("session-controls");
      if (ctl) ctl.hidden = activeStates.indexOf(s.state) < 0;
      const cap = document.getElementById("session-capture");
      if (cap) cap.disabled = s.state !== "waiting_for_user";
      const tp = document.getElementById("terminal-panel");
      // A terminal that failed to connect stays in view with its reason.
      if (tp) tp.hidden = !(s.interactive && (s.state === "waiting_for_user" || termFailed));
      if (activeStates.indexOf(s.state) < 0) {
        termDisconnect("the session ended: " + (words[s.state] || s.state));
      }
    }

    async function pollSession() {
      if (!ses) return;
      const id = ses.id;
      const [sr, er] = await Promise.all([api("GET", "/api/v1/setup-sessions/" + encodeURIComponent(id)),
        api("GET", "/api/v1/setup-sessions/" + encodeURIComponent(id) + "/events?after=" + cursor)]);
      if (!ses || ses.id !== id) return;
      if (er.status === 200) {
        const ol = document.getElementById("session-events");
        er.body.items.forEach(function (e) {
          const li = document.createElement("li");
          li.dataset.seq = e.seq;
          li.textContent = e.message;
          ol.append(li);
        });
        cursor = er.body.cursor;
      }
      if (sr.status === 200) {
        const was = ses.state;
        showSession(sr.body);
        // A session asked to promote is captured an instant before it
        // is promoted: a captured one is polled a few more times.
        if (sr.body.state === "captured" && settle++ < 10) return;
        if (activeStates.indexOf(sr.body.state) < 0) {
          stopPoll();
          if (activeStates.indexOf(was) >= 0 || sr.body.template) loadTemplates();
        }
      }
    }
    let settle = 0;
    function startPoll() { settle = 0; stopPoll(); poll = setInterval(pollSession, 500); pollSession(); }
    function stopPoll() { if (poll) { clearInterval(poll); poll = null; } }

    function follow(s) {
      cursor = 0;
      document.getElementById("session-events").replaceChildren();
      showSession(s);
      startPoll();
    }

    async function startSetup(interactive) {
      const errEl = document.getElementById("setup-error");
      setText(errEl, "");
      const body = { interactive: interactive, promote: document.getElementById("setup-promote").checked };
      const name = document.getElementById("setup-name").value.trim();
      if (name) body.name = name;
      const text = document.getElementById("setup-script").value.trim();
      if (text) {
        try { body.script = JSON.parse(text); } catch (e) { setText(errEl, "script: not JSON: " + e.message); return; }
      } else if (!interactive) {
        setText(errEl, "script: a scripted setup needs a script");
        return;
      }
      const res = await api("POST", envPath + "/setup-sessions", body);
      if (res.status !== 202) {
        const e = errOf(res);
        setText(errEl, (e.field ? e.field + ": " : "") + e.message);
        return;
      }
      follow(res.body);
    }

    if (act) {
      const sb = document.getElementById("setup-scripted");
      if (sb) sb.addEventListener("click", function () { startSetup(false); });
      const ib = document.getElementById("setup-interactive");
      if (ib) ib.addEventListener("click", function () { startSetup(true); });
      const cap = document.getElementById("session-capture");
      if (cap) cap.addEventListener("click", async function () {
        if (!ses) return;
        const errEl = document.getElementById("session-error");
        setText(errEl, "");
        termDisconnect("capturing: the terminal closes");
        setText(document.getElementById("session-state"), "capturing the sandbox…");
        cap.disabled = true;
        const res = await api("POST", "/api/v1/setup-sessions/" + encodeURIComponent(ses.id) + "/capture",
          { promote: document.getElementById("capture-promote").checked });
        if (res.status !== 200) { setText(errEl, "capture failed: " + errOf(res).message); }
        await pollSession();
        await loadTemplates();
      });
      const cb = document.getElementById("session-cancel");
      if (cb) cb.addEventListener("click", async function () {
        if (!ses) return;
        const res = await api("POST", "/api/v1/setup-sessions/" + encodeURIComponent(ses.id) + "/cancel");
        if (res.status !== 200) setText(document.getElementById("session-error"), "cancel failed: " + errOf(res).message);
        await pollSession();
      });
    }

    // The terminal: a single-use token per connection; a reconnect sends
    // the process and the offset of the output received, so the server
    // sends exactly the missing bytes ("attached") or its tail ("reset").
    let sock = null, proc = "", offset = 0, xterm = null, decoder = null;
    const useX = imgPanel.dataset.xterm === "true" && typeof window.Terminal === "function";
    const outPre = document.getElementById("term-out");
    function termStatus(t) {
      termFailed = t.startsWith("connect failed");
      setText(document.getElementById("term-status"), t);
      const tp = document.getElementById("terminal-panel");
      if (termFailed && tp) tp.hidden = false;
    }
    // The transcript is what the terminal shows since its last reset, as
    // received (for reading the page; xterm draws on a canvas).
    imgPanel.berthTranscript = "";
    function termClear() {
      imgPanel.berthTranscript = "";
      if (xterm) xterm.reset();
      if (outPre) outPre.textContent = "";
    }
    function termWrite(text) {
      imgPanel.berthTranscript += text;
      if (xterm) xterm.write(text);
      if (outPre) outPre.append(text.replace(/\r\n/g, "\n").replace(/\x1b\[[0-9;?]*[A-Za-z]/g, ""));
    }
    function termSend(data) {
      if (sock && sock.readyState === WebSocket.OPEN) sock.send(new TextEncoder().encode(data));
    }
    function termSize() {
      return { rows: parseInt(document.getElementById("term-rows").value, 10) || 24,
        cols: parseInt(document.getElementById("term-cols").value, 10) || 80 };
    }
    function termResize() {
      const z = termSize();
      if (xterm) xterm.resize(z.cols, z.rows);
      if (sock && sock.readyState === WebSocket.OPEN) sock.send(JSON.stringify({ type: "resize", rows: z.rows, cols: z.cols }));
    }
    function termDisconnect(why) {
      if (sock) {
        const s = sock;
        sock = null;
        s.close(1000, "disconnect");
        termStatus(why || "disconnected (reconnect resumes at byte " + offset + ")");
      }
      const c = document.getElementById("term-connect"), d = document.getElementById("term-disconnect");
      if (c) c.disabled = false;
      if (d) d.disabled = true;
    }
    async function termConnect() {
      if (!ses || sock) return;
      termStatus("connecting…");
      const res = await api("POST", "/api/v1/setup-sessions/" + encodeURIComponent(ses.id) + "/terminal-token");
      if (res.status !== 201) { termStatus("connect failed: " + errOf(res).message); return; }
      const u = new URL(res.body.path, window.location.href);
      u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
      u.searchParams.set("token", res.body.token);
      if (proc) { u.searchParams.set("process", proc); u.searchParams.set("offset", String(offset)); }
      if (useX && !xterm) {
        xterm = new window.Terminal({ rows: termSize().rows, cols: termSize().cols });
        xterm.open(document.getElementById("term-xterm"));
        xterm.on("data", termSend);
        imgPanel.berthTerm = xterm;
      }
      decoder = new TextDecoder();
      const s = new WebSocket(u.toString());
      s.binaryType = "arraybuffer";
      sock = s;
      let opened = false;
      s.onopen = function () {
        opened = true;
        document.getElementById("term-connect").disabled = true;
        document.getElementById("term-disconnect").disabled = false;
      };
      s.onmessage = function (m) {
        if (sock !== s) return;
        if (typeof m.data === "string") {
          const f = JSON.parse(m.data);
          if (f.type === "attached" || f.type === "reset") {
            if (f.type === "reset") termClear();
            proc = f.process;
            offset = f.offset || 0;
            termStatus((f.type === "attached" ? "connected" : "connected (reset: showing the latest output)") + " to " + proc);
            termResize();
          } else if (f.type === "exit") {
            termStatus("the shell exited (code " + (f.code || 0) + ")");
            proc = "";
          } else if (f.type === "error") {
            termStatus("terminal error: " + f.error);
          }
          return;
        }
        offset += m.data.byteLength;
        termWrite(decoder.decode(new Uint8Array(m.data), { stream: true }));
        imgPanel.dataset.termOffset = String(offset);
      };
      s.onclose = function (ev) {
        if (sock !== s) return;
        sock = null;
        document.getElementById("term-connect").disabled = false;
        document.getElementById("term-disconnect").disabled = true;
        termStatus(opened ? "connection closed (" + (ev.reason || ev.code) + "): Connect resumes" : "connect failed: the server refused the terminal");
      };
    }
    const tc = document.getElementById("term-connect");
    if (tc) {
      tc.addEventListener("click", termConnect);
      document.getElementById("term-disconnect").addEventListener("click", function () { termDisconnect(); });
      document.getElementById("term-resize").addEventListener("click", termResize);
      const line = document.getElementById("term-line");
      if (line) line.addEventListener("submit", function (ev) {
        ev.preventDefault();
        const inp = document.getElementById("term-in");
        termSend(inp.value + "\n");
        inp.value = "";
      });
    }

    // The latest session of the environment (an active one resumes).
    (async function () {
      await loadTemplates();
      const sl = await api("GET", envPath + "/setup-sessions");
      if (sl.status === 200 && sl.body.items.length > 0) follow(sl.body.items[sl.body.items.length - 1]);
    })();
  }
})();
