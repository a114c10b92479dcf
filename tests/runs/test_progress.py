"""Feedback on long phases: eval, validation and expert demos show a progress bar with its rate and ETA,
and log lines are printed around a bar instead of into it."""

import re
import subprocess
import sys

import pytest
from conftest import ragen_cmd
from tqdm import tqdm


def test_a_log_line_never_lands_inside_a_progress_bar(capsys):
    from ragen.log import configure_logging, log

    configure_logging()
    bar = tqdm(total=10, desc="phase", file=sys.stderr, mininterval=0)
    bar.update(3)
    log.info("between_updates", n=3)
    bar.update(2)
    bar.close()
    err = capsys.readouterr().err
    (line,) = [line for line in err.split("\n") if "between_updates" in line]
    shown = line.split("\r")[-1]  # what a terminal shows on that row: the text after the last carriage return
    assert shown.lstrip().startswith(tuple("0123456789")) and "%|" not in shown, repr(line)
    assert re.search(r"phase: +50%\|.*\| 5/10", err.split("between_updates", 1)[1])  # the bar is drawn again below


@pytest.mark.slow
def test_eval_shows_a_bar_with_rate_and_eta(tmp_path):
    res = subprocess.run(
        # 48-token answers: the random tiny model writes its whole cap every turn, and the bar counts turns, not tokens
        ragen_cmd("eval", "--env", "frozenlake", "--model", "tiny", "--seeds", "1", "-o", "response_length=48",
                  "--out", str(tmp_path / "e")),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    frames = res.stderr.replace("\r", "\n")
    # tqdm: "eval: 100%|...| 5/5 [01:27<00:00, 17.50s/turn]" (elapsed<ETA, rate): 1 episode x frozenlake's 5 turns
    assert re.search(r"eval: 100%\|[^|]*\| 5/5 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+(turn/s|s/turn)\]", frames), frames[-2000:]
