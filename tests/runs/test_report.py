"""`ragen report` (HTML: curves, collapse panel, trajectory viewer, summary, config), `ragen plot` (PNG), the wandb
`val/generations` table and `logging.report_every`; one real 2-step run is opened in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import ragen_cmd, run_two_steps

from ragen.contract.trajectory import Trajectory, TurnRecord
from ragen.runs import report

# ---- synthetic run folders in the real formats (fast) -----------------------------------------------------------


def encode(text: str) -> list[int]:
    """The synthetic runs' tokenizer: one id per character, so ``decode`` below is exact."""
    return [ord(c) for c in text]


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def make_trajectory(step: int, group: int, member: int, success: bool, split: str = "train") -> dict:
    """A two-turn trajectory row as the trainer writes it (``Trajectory.to_dict`` plus the step)."""
    prompt = (
        f"<|im_start|>system\nSolve it.<|im_end|>\n<|im_start|>user\nTurn 1:\nmap g{group} P_G<|im_end|>\n"
        "<|im_start|>assistant\n<think>"
    )
    r1 = f"I see the goal to the right of g{group}.</think><answer>Right</answer><|im_end|>"
    delta = f"\n<|im_start|>user\nReward:\n0.0\nTurn 2:\nmap g{group} _P G<|im_end|>\n<|im_start|>assistant\n<think>"
    r2 = (f"member {member} moves on.</think><answer>Right</answer><|im_end|>" if success
          else f"member {member} babbles </script><b>bold</b><answer>Jump")
    parts = [("prompt", prompt), ("response", r1), ("delta", delta), ("response", r2)]
    ids, segments = [], []
    for kind, text in parts:
        segments.append((kind, len(ids), len(ids) + len(text)))
        ids += encode(text)
    turns = [TurnRecord(r1, "Right", ["Right"], [], 0.0, 0.0, True, {}, False, segments[1][1:]),
             TurnRecord(r2, "Right" if success else None, ["Right"] if success else [], [], 1.0 if success else 0.0,
                        0.0 if success else -0.1, success, {}, False, segments[3][1:])]
    t = Trajectory(env_name="toy", seed=100 + group, group_id=group, rollout_index=member, split=split,
                   policy_version=step, input_ids=ids, loss_mask=[0] * len(ids), rollout_logprobs=[0.0] * len(ids),
                   segments=segments, turns=turns, reward=1.0 if success else 0.0, penalty=0.0 if success else -0.1,
                   success=success, truncated=not success, truncation_reason=None if success else "max_turns")
    return {"step": step, **t.to_dict()}


def metric_rows(offset: float, steps: int = 6) -> list[dict]:
    """metrics.jsonl rows: warm start and validation at step 0, collapse metrics at 1 and 5, an early stop at the
    end."""
    rows = [{"step": 0, "sft/loss_last": 0.5, "val/success": 0.1 + offset}]
    for s in range(1, steps + 1):
        row = {"step": s, "rollout/success": 0.1 * s + offset, "reward/mean": 0.2 * s - offset, "reward/group_std": 0.3,
               "actor/entropy": 2.0 - 0.1 * s, "actor/grad_norm": 1.0 + s, "rollout/filter_kept_ratio": 0.5,
               "actor/pg_loss": -0.01 * s, "timing/step_s": 3.25}
        if s in (1, 5):
            row |= {
                "collapse_first_turn_sample/mi_estimate": 1.0 / s + offset,
                "collapse_first_turn_sample/conditional_entropy_est": 3.0,
                "collapse/regime": 0.0 if s == 1 else 2.0,
            }
        if s == steps:
            row |= {"val/success": 0.4 + offset, "early_stopped/reward_variance_collapse": 1.0}
        rows.append(row)
    return rows


def make_run(folder: Path, offset: float = 0.0) -> Path:
    folder.mkdir(parents=True)
    config = {"env": {"name": "toy"}, "collapse": {"h_threshold": 1.5, "i_threshold": 0.5}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metric_rows(offset)))
    train = [make_trajectory(s, g, m, success=(m == 0)) for s in (1, 2) for g in (0, 1) for m in (0, 1)]
    (folder / "trajectories.jsonl").write_text("".join(json.dumps(t) + "\n" for t in train))
    val = [make_trajectory(6, g, 0, success=(g == 1), split="val") for g in (0, 1)]
    (folder / "val_trajectories.jsonl").write_text("".join(json.dumps(t) + "\n" for t in val))
    return folder


def page_data(page: str) -> list[dict]:
    """The viewer's embedded JSON, parsed as the browser parses it."""
    raw = re.search(r'<script id=report-data type="application/json">(.*?)</script>', page, re.S).group(1)
    return json.loads(raw)


@pytest.fixture
def two_runs(tmp_path):
    return make_run(tmp_path / "grpo"), make_run(tmp_path / "ppo", offset=0.05)


def test_report_has_curves_collapse_panel_summary_config_and_viewer_data(two_runs, tmp_path):
    out = report.build_report(list(two_runs), tmp_path / "r.html", decode=decode)
    page = out.read_text()
    curves = re.findall(r"<figure class=curve data-metric='([^']+)'>\s*<svg", page)
    assert curves[:7] == ["rollout/success", "reward/mean", "reward/group_std", "actor/entropy",
                          "rollout/filter_kept_ratio", "actor/grad_norm", "actor/pg_loss"]
    assert {"collapse_first_turn_sample/mi_estimate", "collapse_first_turn_sample/conditional_entropy_est",
            "collapse_first_turn_sample/regime"} <= set(curves)
    # both runs overlaid (legend text), validation points, the warm start and the early stop drawn on the curves
    assert "grpo" in page and "ppo" in page and "(val/success)" in page
    assert "warm start" in page and "early stop: reward_variance_collapse" in page
    # the four V2 regimes named, and each run's last regime (collapse/regime 2 at step 5)
    for name in ("diverse reasoning", "compressed reasoning", "template collapse", "low-entropy collapse"):
        assert name in page
    assert "grpo: template collapse at step 5" in page
    # summary numbers are the metrics.jsonl values as written; the config is shown
    assert re.search(r"<td>actor/grad_norm</td><td class=num>7.0</td><td class=num>6</td>", page)
    assert re.search(r"<td>timing/step_s</td><td class=num>3.25</td>", page)
    assert "h_threshold: 1.5" in page


def test_viewer_data_has_each_turns_observation_think_answer_action_and_reward(two_runs, tmp_path):
    page = report.build_report([two_runs[0]], tmp_path / "r.html", decode=decode).read_text()
    [run] = page_data(page)
    by_id = {(t["split"], t["step"], t["group"], t["member"]): t for t in run["trajectories"]}
    assert len(by_id) == 10  # 8 train + 2 val
    ok, bad = by_id[("train", 2, 1, 0)], by_id[("train", 2, 1, 1)]
    assert run["strings"][ok["turns"][0]["obs"]] == "Turn 1:\nmap g1 P_G"  # the user message, chat markup removed
    assert run["strings"][ok["turns"][1]["obs"]] == "Reward:\n0.0\nTurn 2:\nmap g1 _P G"
    assert "Solve it." in run["strings"][ok["prompt"]]
    assert ok["turns"][0]["think"] == "I see the goal to the right of g1."
    assert ok["turns"][0]["answer"] == "Right" and ok["turns"][0]["executed"] == ["Right"]
    assert (ok["success"], ok["turns"][1]["reward"], ok["end"]) == (True, 1.0, "success")
    assert (bad["success"], bad["turns"][1]["valid"], bad["turns"][1]["penalty"]) == (False, False, -0.1)
    assert bad["turns"][1]["parsed"] is None and bad["turns"][1]["answer"] == "Jump"
    assert bad["end"] == "truncated: max_turns"
    # model text that closes a script element stays data: the page still has exactly the two script elements
    assert page.count("</script>") == 2 and "</script><b>bold" in bad["turns"][1]["raw"]


@pytest.mark.parametrize(("text", "opened", "think", "answer"), [
    ("plan</think> <answer>Up || Left</answer>", True, "plan", "Up || Left"),
    ("<think>plan</think><answer>Up</answer><|im_end|>", False, "plan", "Up"),
    ("no closing tag at all<|endoftext|>", True, "no closing tag at all", ""),
    ("Up", False, "", "Up"),
    ("thinking <answer>Down", True, "thinking", "Down"),
])
def test_split_response(text, opened, think, answer):
    assert report._split_response(text, opened) == (think, answer)


def test_eval_folder_report_shows_its_metrics_and_trajectories(tmp_path):
    out = tmp_path / "eval"
    out.mkdir()
    (out / "trajectories.jsonl").write_text(json.dumps(make_trajectory(0, 0, 0, True, "val")) + "\n")
    (out / "metrics.json").write_text(json.dumps({"success_rate": 0.75, "pass@4": 1.0}))
    page = report.build_report([out], out / "report.html", decode=decode).read_text()
    assert "<td>success_rate</td><td class=num>0.75</td>" in page
    assert page_data(page)[0]["trajectories"][0]["turns"][0]["answer"] == "Right"


def test_a_torn_last_line_of_a_killed_run_is_skipped(two_runs, tmp_path):
    run = two_runs[0]
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 7, "rollout/succ')
    with open(run / "trajectories.jsonl", "a") as f:
        f.write('{"step": 3, "env_na')
    data = report.read_run(run, decode)
    assert len(data["metrics"]) == 7 and len(data["trajectories"]) == 10


def test_a_run_file_linked_out_of_the_folder_is_refused_not_copied_into_the_page(two_runs, tmp_path):
    """A copied run folder is data: its config.yaml linked to a private file elsewhere used to be embedded in the
    report page; a line nested past the parser's recursion limit used to stop the report with a traceback."""
    run = two_runs[0]
    private = tmp_path / "id_rsa"
    private.write_text("PRIVATE KEY\n")
    (run / "config.yaml").unlink()
    (run / "config.yaml").symlink_to(private)
    proc = subprocess.run(ragen_cmd("report", str(run), "-o", str(tmp_path / "r.html")), capture_output=True,
                          text=True)
    assert proc.returncode == 1 and "leads out of" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "r.html").exists() or "PRIVATE KEY" not in (tmp_path / "r.html").read_text()
    (run / "config.yaml").unlink()
    (run / "config.yaml").write_text("env: {name: toy}\n")
    with open(run / "trajectories.jsonl", "a") as f:
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
    assert len(report.read_run(run, decode)["trajectories"]) == 10


def test_without_a_tokenizer_the_viewer_says_observations_are_not_decoded(two_runs):
    data = report.read_run(two_runs[0])  # config.yaml names no model and the folder holds no tokenizer.json
    assert all(turn["obs"] is None for t in data["trajectories"] for turn in t["turns"])
    assert data["trajectories"][0]["turns"][0]["answer"] == "Right"  # responses are text already
    assert "no tokenizer.json found for this run" in (report.TEMPLATES / "report.js").read_text()


def test_report_of_a_folder_without_run_files_is_a_one_line_error(tmp_path):
    proc = subprocess.run(ragen_cmd("report", str(tmp_path)), capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        f"Error: {str(tmp_path)!r} is not a run or eval folder (no metrics.jsonl or trajectories.jsonl)"]


def test_refresh_writes_every_n_steps_and_never_raises(two_runs, tmp_path, monkeypatch):
    run = two_runs[0]
    monkeypatch.setattr(report, "find_decoder", lambda run_dir: decode)
    report.refresh(run, 3, every=2)
    assert not (run / "report.html").exists()
    report.refresh(run, 4, every=2)
    assert (run / "report.html").is_file()
    report.refresh(tmp_path / "missing", 4, every=2)  # logged as report_failed, the run goes on
    assert not (tmp_path / "missing" / "report.html").exists()


# ---- ragen plot ---------------------------------------------------------------------------------------------------


def test_plot_writes_a_png_with_both_runs_overlaid(two_runs, tmp_path):
    import numpy as np
    from PIL import Image

    out = tmp_path / "curves.png"
    proc = subprocess.run(ragen_cmd("plot", *map(str, two_runs), "--metric", "rollout/success", "--metric",
                                    "reward/mean", "-o", str(out)), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    img = Image.open(out)
    assert img.size == (1200, 384)  # two 5 x 3.2 inch panels side by side at 120 dpi
    pixels = np.asarray(img.convert("RGB")).reshape(-1, 3)
    assert (pixels != 255).any(axis=1).mean() > 0.02  # not blank
    for colour in ((31, 119, 180), (214, 39, 40)):  # the first and the second run's line colour
        assert (pixels == colour).all(axis=1).sum() > 200


def test_plot_unknown_metric_is_a_one_line_error(two_runs, tmp_path):
    proc = subprocess.run(ragen_cmd("plot", str(two_runs[0]), "--metric", "reward/maen", "-o", str(tmp_path / "x.png")),
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "Error: --metric 'reward/maen': no run logged it; did you mean 'reward/mean'?"


# ---- a real 2-step run: report_every, ragen report, the wandb table, headless Chromium ----------------------------


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """`ragen run` for two steps with logging.report_every=1 and wandb offline; then `ragen report RUN`."""
    pytest.importorskip("wandb")
    tmp = tmp_path_factory.mktemp("real")
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        run, rows = run_two_steps("frozenlake", tmp, "logging.report_every=1", "logging.wandb=true")
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    trained_report = (run / "report.html").read_text()
    proc = subprocess.run(ragen_cmd("report", str(run)), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    return run, rows, trained_report


@pytest.mark.slow
def test_real_run_report(real_run):
    run, rows, trained_report = real_run
    assert "rollout/success" in trained_report  # written by the trainer (report_every=1)
    page = (run / "report.html").read_text()
    [data] = page_data(page)
    val = [t for t in data["trajectories"] if t["split"] == "val"]
    assert {t["step"] for t in val} == {0, 2} and {
        t["step"] for t in data["trajectories"] if t["split"] == "train"
    } == {1, 2}
    first = data["strings"][val[0]["turns"][0]["obs"]]
    assert first.startswith("Turn 1:\nState:") and "Grid Map" in first  # decoded with the run's own tokenizer
    last = rows[-1]
    assert f"<td>rollout/success</td><td class=num>{json.dumps(last['rollout/success'])}</td>" in page


@pytest.mark.slow
@pytest.mark.slow
def test_doctor_on_the_real_run_of_an_untrained_model(real_run):
    """The tiny model as initialised, no warm start (TINY): no member of any group succeeds or even answers, so every
    group's rewards are equal and `ragen doctor` names zero signal with the run's own numbers; its 2 greedy levels are
    replayed blind (the best of every 10-action sequence on 16 training levels) and the policy is not above that."""
    run, rows, _ = real_run
    proc = subprocess.run(ragen_cmd("doctor", str(run), "--json", "--search-levels", "16"), capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    found = {f["code"]: f for f in data["findings"]}
    assert rows[-1]["rollout/frac_zero_std_groups"] == 1.0  # what the untrained model does (checked, not assumed)
    zero = found["zero-signal"]
    assert zero["severity"] == "high" and zero["evidence"][0]["values"] == [1.0]
    assert zero["evidence"][0]["steps"] == [2, 2]  # the last half of the two steps
    base = data["open_loop"]
    assert base["levels"] == 2 and base["policy"] == rows[-1]["paired/success_after"] and len(base["sequence"]) == 10
    assert "blind-policy" in found and found["blind-policy"]["severity"] == "warning"  # only the blind replay says so
    text = subprocess.run(ragen_cmd("doctor", str(run), "--no-open-loop"), capture_output=True, text=True,
                          timeout=300).stdout
    findings = [line.split(":")[0].strip() for line in text.splitlines() if line.startswith("  [")]
    assert findings == ["[high] zero-signal", "[warning] no-learning"]  # blind-policy needs the replay here


def test_real_run_logs_val_generations_table_to_wandb(real_run):
    run, rows, _ = real_run
    tables = sorted(run.glob("wandb/offline-run-*/files/media/table/val/generations_*.table.json"))
    assert len(tables) == 2  # validation before training and after the last step
    table = json.loads(tables[-1].read_text())
    assert table["columns"] == [
        "step",
        "env",
        "seed",
        "member",
        "success",
        "score",
        "reward",
        "num_turns",
        "end",
        "turns",
    ]
    val = [json.loads(line) for line in (run / "val_trajectories.jsonl").read_text().splitlines()]
    last = [t for t in val if t["step"] == 2]
    assert [r[2] for r in table["data"]] == [t["seed"] for t in last]
    assert [r[5] for r in table["data"]] == [t["score"] for t in last]
    assert (
        table["data"][0][9].startswith("[turn 1] reward")
        and last[0]["turns"][0]["response_text"] in table["data"][0][9]
    )


@pytest.mark.slow
def test_eval_writes_the_trajectory_viewer(real_run, tmp_path):
    run, _, _ = real_run
    out = tmp_path / "eval"
    proc = subprocess.run(
        ragen_cmd(
            "eval",
            "--env",
            "frozenlake",
            "--model",
            str(run / "final"),
            "--seeds",
            "2",
            "-k",
            "2",
            "-o",
            "response_length=32",
            "--out",
            str(out),
        ),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"viewer: {out / 'report.html'}" in proc.stdout
    [data] = page_data((out / "report.html").read_text())
    assert sorted((t["group"], t["member"]) for t in data["trajectories"]) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert data["strings"][data["trajectories"][0]["turns"][0]["obs"]].startswith("Turn 1:\nState:")


def js_number(x: float) -> str:
    """How the viewer writes a number: six significant digits, integers without '.0' (JavaScript's String())."""
    v = float(f"{x:.6g}")
    return str(int(v)) if v.is_integer() else repr(v)


def chromium_paths() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(chromium_paths() is None, reason="needs Debian's chromium and chromium-driver")
def test_report_in_headless_chromium(real_run, tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run, _, _ = real_run
    browser, driver_path = chromium_paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}", "--window-size=1400,2200"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    try:
        driver.get((run / "report.html").as_uri())
        assert driver.execute_script("return document.body.dataset.viewerReady") == "1"
        # the curves rendered: laid-out SVGs with drawn paths
        sizes = driver.execute_script("return [...document.querySelectorAll('#curves svg')].map(s => "
                                      "[s.getBoundingClientRect().width, s.getBoundingClientRect().height, "
                                      "s.querySelectorAll('path').length])")
        assert len(sizes) >= 6 and all(w > 100 and h > 50 and n > 5 for w, h, n in sizes)
        # pick a trajectory: the last validation, its first group
        Select(driver.find_element(By.ID, "sel-split")).select_by_value("val")
        Select(driver.find_element(By.ID, "sel-step")).select_by_value("2")
        Select(driver.find_element(By.ID, "sel-group")).select_by_value("1")
        cards = driver.find_elements(By.CSS_SELECTOR, ".traj-card")
        val = [json.loads(line) for line in (run / "val_trajectories.jsonl").read_text().splitlines()]
        want = next(t for t in val if t["step"] == 2 and t["group_id"] == 1)
        assert [c.get_attribute("data-episode") for c in cards] == [f"val/frozenlake/s{want['seed']}/g1/r0"]
        text = cards[0].text
        assert f"{want['num_turns']} turns" in text and "Turn 1" in text and "State:" in text
        for turn in want["turns"]:
            assert f"reward {js_number(turn['reward'])} · penalty {js_number(turn['penalty'])}" in text
        # the raw response of a turn opens and shows the sampled text
        cards[0].find_element(By.CSS_SELECTOR, ".turn details summary").click()
        raw = cards[0].find_element(By.CSS_SELECTOR, ".turn details pre").text
        assert raw.strip() and raw.strip()[:20] in want["turns"][0]["response_text"]
        # the filters: successes only (the untrained model has none at this step, so the viewer says so), then failures
        Select(driver.find_element(By.ID, "sel-filter")).select_by_value("success")
        shown = driver.find_elements(By.CSS_SELECTOR, ".traj-card")
        assert all("success" in c.get_attribute("class").split() for c in shown)
        assert shown or "No trajectory matches" in driver.find_element(By.ID, "group-view").text
        Select(driver.find_element(By.ID, "sel-filter")).select_by_value("failure")
        shown = driver.find_elements(By.CSS_SELECTOR, ".traj-card")
        assert shown and all("failure" in c.get_attribute("class").split() for c in shown)
        # the choice made before survives a filter that hid it
        assert [c.get_attribute("data-episode") for c in shown] == [f"val/frozenlake/s{want['seed']}/g1/r0"]
        # nothing was fetched: the page is self-contained
        assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
        shot = run / "report-screenshot.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        driver.quit()
