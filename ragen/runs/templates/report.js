// The trajectory viewer of `ragen report`: pick run, split, step, env, group and member; the group's members are shown
// side by side, turn by turn. Every text goes through textContent, so model output can never inject markup.
(function () {
  "use strict";
  const RUNS = JSON.parse(document.getElementById("report-data").textContent);
  const ids = ["run", "split", "step", "env", "group", "member", "filter"];
  const sel = Object.fromEntries(ids.map((k) => [k, document.getElementById("sel-" + k)]));
  const FILTERS = {
    all: () => true,
    failure: (t) => !t.success,
    success: (t) => t.success,
    invalid: (t) => t.turns.some((u) => !u.valid),
  };

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  // The user's last choice per select: kept across filters that hide it for a while (success, then failure again).
  const wanted = {};

  // Replace a select's options, keeping the wanted (else the current) choice when it is offered.
  function fill(select, values, labels) {
    const keep = wanted[select.id.slice(4)] ?? select.value;
    select.replaceChildren(...values.map((v, i) => el("option", { value: String(v) }, labels ? labels[i] : v)));
    if (values.map(String).includes(keep)) select.value = keep;
  }

  // Numbers as people read them: six significant digits (0.9000000000000001 -> 0.9).
  const num = (x) => String(Number(Number(x).toPrecision(6)));

  const uniq = (xs) => [...new Set(xs)].sort((a, b) => (typeof a === "number" ? a - b : String(a).localeCompare(b)));

  function candidates() {
    const run = RUNS[Number(sel.run.value)] || { trajectories: [] };
    const keep = FILTERS[sel.filter.value] || FILTERS.all;
    return run.trajectories.filter(keep);
  }

  // Narrow the choices top-down: each select offers only values that have a trajectory under the ones above it.
  function refreshChoices() {
    let ts = candidates();
    fill(sel.split, uniq(ts.map((t) => t.split)));
    ts = ts.filter((t) => t.split === sel.split.value);
    fill(sel.step, uniq(ts.map((t) => t.step)));
    ts = ts.filter((t) => String(t.step) === sel.step.value);
    fill(sel.env, uniq(ts.map((t) => t.env)));
    ts = ts.filter((t) => t.env === sel.env.value);
    const groups = uniq(ts.map((t) => t.group));
    fill(sel.group, groups, groups.map((g) => {
      const g_ts = ts.filter((t) => t.group === g);
      return `${g} (seed ${g_ts[0].seed}, ${g_ts.filter((t) => t.success).length}/${g_ts.length} ok)`;
    }));
    ts = ts.filter((t) => String(t.group) === sel.group.value);
    const members = uniq(ts.map((t) => t.member));
    fill(sel.member, ["all", ...members], ["all, side by side", ...members.map(String)]);
    if (sel.member.value !== "all") ts = ts.filter((t) => String(t.member) === sel.member.value);
    return ts;
  }

  function block(parent, label, text, cls) {
    parent.appendChild(el("div", { class: "label" }, label));
    parent.appendChild(el("pre", { class: cls }, text === "" ? "(empty)" : text));
  }

  function turnView(run, u, k) {
    const div = el("div", { class: "turn" + (u.valid ? "" : " invalid") });
    div.appendChild(el("div", { class: "label" }, `Turn ${k + 1}`));
    block(div, "observation", u.obs === null ? "(no tokenizer.json found for this run: not decoded)" : run.strings[u.obs], "obs");
    block(div, "<think>", u.think, "think");
    block(div, "<answer>", u.answer, "answer");
    const facts = el("div", { class: "facts" });
    const action = u.parsed === null ? "none (no well-formed answer)" : u.parsed;
    facts.appendChild(el("div", {}, `parsed action: ${action}; executed: [${u.executed.join(", ")}]` +
      (u.invalid.length ? `; invalid: [${u.invalid.join(", ")}]` : "")));
    facts.appendChild(el("span", { class: u.valid ? "good" : "bad" }, u.valid ? "valid format" : "invalid format"));
    facts.appendChild(el("span", { class: "reward" }, ` · reward ${num(u.reward)} · penalty ${num(u.penalty)} · generation ${u.finish}`));
    div.appendChild(facts);
    const raw = el("details", {});
    raw.appendChild(el("summary", {}, "raw response"));
    raw.appendChild(el("pre", {}, u.raw));
    div.appendChild(raw);
    return div;
  }

  function card(run, t) {
    const div = el("div", { class: "traj-card " + (t.success ? "success" : "failure"),
                            "data-episode": `${t.split}/${t.env}/s${t.seed}/g${t.group}/r${t.member}` });
    div.appendChild(el("h3", {}, `member ${t.member} · seed ${t.seed} · ${t.success ? "success" : "failure"}`));
    div.appendChild(el("div", { class: "summary" },
      `score ${num(t.score)} (reward ${num(t.reward)}, penalty ${num(t.penalty)}) · ${t.turns.length} turns · end: ${t.end}`));
    if (t.prompt !== null) {
      const prompt = el("details", { class: "prompt" });
      prompt.appendChild(el("summary", {}, "first prompt as the model read it (system message, chat tokens)"));
      prompt.appendChild(el("pre", {}, run.strings[t.prompt]));
      div.appendChild(prompt);
    }
    t.turns.forEach((u, k) => div.appendChild(turnView(run, u, k)));
    return div;
  }

  function render() {
    const ts = refreshChoices();
    const run = RUNS[Number(sel.run.value)];
    const view = document.getElementById("group-view");
    view.replaceChildren(...ts.map((t) => card(run, t)));
    if (!ts.length) view.appendChild(el("p", { class: "meta" }, "No trajectory matches this choice."));
    document.getElementById("viewer-count").textContent = `${ts.length} shown`;
    history.replaceState(null, "", "#" + ids.map((k) => `${k}=${encodeURIComponent(sel[k].value)}`).join("&"));
  }

  // A link such as report.html#step=2&group=1 opens the viewer on that choice.
  function fromHash() {
    const want = new URLSearchParams(location.hash.slice(1));
    fill(sel.run, RUNS.map((_, i) => i), RUNS.map((r) => r.name));
    for (const k of ids) {
      if (!want.has(k)) continue;
      if (k !== "run" && k !== "filter") refreshChoices();
      sel[k].value = want.get(k);
      wanted[k] = want.get(k);
    }
  }

  fromHash();
  ids.forEach((k) => sel[k].addEventListener("change", () => {
    wanted[k] = sel[k].value;
    render();
  }));
  render();
  document.body.dataset.viewerReady = "1";
})();
