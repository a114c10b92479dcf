#!/usr/bin/env python3
"""A stand-in for the Lean REPL's JSON protocol, for testing ragen-lean's protocol layer only (no Lean semantics).

Blank-line separated JSON on stdin/stdout like leanprover-community/repl. A statement ``theorem NAME : k := by sorry``
(``k`` an integer) opens a proof with ``k`` goals ``⊢ goal i``. Tactics: ``step`` closes the first goal; ``split``
adds one; ``noop`` changes nothing; ``bad`` answers an error message; ``crash`` answers ``{"message": ...}``;
``hole`` leaves a sorry; ``hang`` never answers; ``exit`` kills the process. Before each answer it prints a log
line, as some REPL builds do. ``FAKE_REPL_LOG`` (a path) records every request, one JSON per line.
"""

import json
import os
import re
import sys
import time

envs: list[str] = []
states: list[list[str]] = []


def answer(obj: dict) -> None:
    sys.stdout.write("Processing request\n" + json.dumps(obj, indent=1) + "\n\n")
    sys.stdout.flush()


def command(req: dict) -> dict:
    if "env" not in req:
        envs.append(req["cmd"])
        return {"env": len(envs) - 1}
    match = re.search(r"theorem \S+ : (\d+) := by\s+sorry", req["cmd"])
    if not match:
        return {"env": req["env"], "messages": [{"severity": "error", "data": "unexpected statement", "pos": {}}]}
    goals = [f"⊢ goal {i}" for i in range(int(match.group(1)))]
    states.append(goals)
    sorry = {"proofState": len(states) - 1, "goal": "\n".join(goals), "pos": {}, "endPos": {}}
    return {
        "env": req["env"],
        "sorries": [sorry],
        "messages": [{"severity": "warning", "data": "declaration uses 'sorry'"}],
    }


def tactic(req: dict) -> dict:
    goals = list(states[req["proofState"]])
    name = req["tactic"].strip()
    if name == "hang":
        time.sleep(3600)
    if name == "exit":
        os._exit(3)
    if name == "crash":
        return {"message": "Lean error:\nunknown tactic"}
    if name == "bad":
        return {"proofState": len(states), "goals": goals, "messages": [{"severity": "error", "data": "type mismatch"}]}
    if name == "hole":
        states.append(goals)
        return {"proofState": len(states) - 1, "goals": goals, "sorries": [{"goal": goals[0], "proofState": 0}]}
    if name == "step" and goals:
        goals = goals[1:]
    elif name == "split" and goals:
        goals = [goals[0] + "a", goals[0] + "b", *goals[1:]]
    elif name != "noop":
        return {"message": f"Lean error:\nunknown tactic {name}"}
    states.append(goals)
    status = "Completed" if not goals else "Incomplete: open goals remain"
    return {"proofState": len(states) - 1, "goals": goals, "proofStatus": status}


def main() -> None:
    log = os.environ.get("FAKE_REPL_LOG")
    block = ""
    for line in sys.stdin:
        if line.strip():
            block += line
            continue
        if not block.strip():
            continue
        req, block = json.loads(block), ""
        if log:
            with open(log, "a") as fh:
                fh.write(json.dumps(req) + "\n")
        answer(tactic(req) if "tactic" in req else command(req))


if __name__ == "__main__":
    main()
