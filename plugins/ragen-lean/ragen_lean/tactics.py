"""Text handling of tactics, without a prover: splitting answers, Coq sentences, and the tactic policy.

* ``split_tactics`` splits a model answer on ``||`` at bracket depth 0 (spec 11), so Coq's ``||`` tactical stays usable
  inside parentheses: ``(lia || lra).``. Strings and comments never split.
* ``coq_sentences`` cuts Coq text into sentences the way Coq's lexer does: a ``.`` followed by white space (or the end)
  ends a sentence; bullets (``-``, ``+``, ``*`` runs), ``{`` / ``}`` and ``N: {`` at a sentence start are sentences
  of their own.
* ``check_coq_action`` turns one action into the pieces sent to ``coqtop`` (one sentence per write) or rejects it:
  at most one real sentence (optionally with focusing bullets/braces around it), no ``admit``/``Admitted``, and no
  vernacular command except a few read-only queries (the policy is documented in the README).
* ``check_lean_tactic`` is the Lean 4 counterpart: no ``sorry``/``admit`` and no meta-programming escapes.
"""

from __future__ import annotations

import re

import attrs

# ---- splitting an answer into actions --------------------------------------------------------------------------------
#: brackets that protect ``||`` from splitting; braces are not counted because Coq also uses them to focus goals
_OPEN, _CLOSE = "([", ")]"


def split_tactics(answer: str, lang: str = "coq") -> list[str]:
    """Split ``answer`` on ``||`` outside parentheses, square brackets, strings and comments; drop empty pieces."""
    pieces, start, depth, i, n = [], 0, 0, 0, len(answer)
    while i < n:
        skip = _skip_literal(answer, i, lang)
        if skip is not None:
            i = skip
            continue
        ch = answer[i]
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)  # a stray closer must not hide every later separator
        elif ch == "|" and answer.startswith("||", i) and depth == 0:
            pieces.append(answer[start:i])
            i += 2
            start = i
            continue
        i += 1
    pieces.append(answer[start:])
    return [p.strip() for p in pieces if p.strip()]


def _skip_literal(text: str, i: int, lang: str) -> int | None:
    """If a string or comment starts at ``i``, the index just past it (or the end when unterminated); else None."""
    if text[i] == '"':
        end = _string_end(text, i, lang)
        return len(text) if end is None else end
    if lang == "coq" and text.startswith("(*", i):
        end = _coq_comment_end(text, i)
        return len(text) if end is None else end
    if lang == "lean" and text.startswith("--", i):
        nl = text.find("\n", i)
        return len(text) if nl < 0 else nl
    if lang == "lean" and text.startswith("/-", i):
        end = text.find("-/", i + 2)
        return len(text) if end < 0 else end + 2
    return None


def _string_end(text: str, i: int, lang: str) -> int | None:
    """Index past the string literal opening at ``i`` (Coq doubles quotes, Lean escapes them), or None."""
    j = i + 1
    while j < len(text):
        if lang == "lean" and text[j] == "\\":
            j += 2
            continue
        if text[j] == '"':
            if lang == "coq" and text.startswith('""', j):
                j += 2
                continue
            return j + 1
        j += 1
    return None


def _coq_comment_end(text: str, i: int) -> int | None:
    """Index past the (nested) Coq comment opening at ``i``, or None when it never closes."""
    depth, j = 0, i
    while j < len(text):
        if text.startswith("(*", j):
            depth += 1
            j += 2
        elif text.startswith("*)", j):
            depth -= 1
            j += 2
            if depth == 0:
                return j
        elif text[j] == '"':
            end = _string_end(text, j, "coq")
            if end is None:
                return None
            j = end
        else:
            j += 1
    return None


# ---- Coq sentences ---------------------------------------------------------------------------------------------------
class SentenceError(ValueError):
    """Text that cannot be cut into complete Coq sentences (an unterminated string or comment)."""


_BULLET = re.compile(r"(-+|\++|\*+)(?=\s|$|[^-+*])")
_GOAL_SELECTOR = r"(?:all|par|!|\d+(?:\s*-\s*\d+)?(?:\s*,\s*\d+(?:\s*-\s*\d+)?)*|\[\s*[\w']+\s*\])"
_SELECTOR_BRACE = re.compile(_GOAL_SELECTOR + r"\s*:\s*\{")


def coq_sentences(text: str) -> tuple[list[str], str]:
    """``(sentences, rest)``: complete sentences of ``text`` in order, and the trailing text with no terminator.

    Bullets and braces at a sentence start are sentences of their own (``"- split."`` gives ``["-", "split."]``).
    Raises ``SentenceError`` for an unterminated string or comment.
    """
    sentences: list[str] = []
    i, n, start = 0, len(text), None
    while i < n:
        ch = text[i]
        if text.startswith("(*", i):  # a comment, between sentences or inside one
            end = _coq_comment_end(text, i)
            if end is None:
                raise SentenceError("unterminated comment '(*'")
            i = end
            continue
        if start is None:  # between sentences: white space, focusing markers
            if ch.isspace():
                i += 1
                continue
            if ch in "{}":
                sentences.append(ch)
                i += 1
                continue
            focus = _SELECTOR_BRACE.match(text, i)  # '2: {' is a whole sentence for Coq
            if focus:
                sentences.append(" ".join(focus.group(0).split()))
                i = focus.end()
                continue
            bullet = _BULLET.match(text, i)
            if bullet:
                sentences.append(bullet.group(0))
                i = bullet.end()
                continue
            start = i
        if ch == '"':
            end = _string_end(text, i, "coq")
            if end is None:
                raise SentenceError("unterminated string")
            i = end
            continue
        # like Coq's lexer, any '.' before white space ends the sentence (so '.. ' too: never smuggle a second one)
        if ch == "." and (i + 1 == n or text[i + 1].isspace()):
            sentences.append(text[start : i + 1].strip())
            start = None
        i += 1
    rest = text[start:].strip() if start is not None else ""
    return sentences, rest


def strip_coq_comments(text: str) -> str:
    """``text`` with comments removed and string contents blanked (for keyword checks)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("(*", i):
            end = _coq_comment_end(text, i)
            i = n if end is None else end
            out.append(" ")
            continue
        if text[i] == '"':
            end = _string_end(text, i, "coq")
            i = n if end is None else end
            out.append('""')
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def is_focus_marker(sentence: str) -> bool:
    """A bullet (``-``, ``++``, ``*``...), a brace or ``N: {``: it (un)focuses goals instead of running a tactic."""
    return sentence in ("{", "}") or bool(re.fullmatch(r"-+|\++|\*+", sentence) or _SELECTOR_BRACE.fullmatch(sentence))


# ---- the Coq tactic policy -------------------------------------------------------------------------------------------
#: vernacular commands the spec names as forbidden (each gets its own message)
COQ_FORBIDDEN_COMMANDS = (
    "Admitted", "Abort", "Axiom", "Parameter", "Hypothesis", "Variable", "Conjecture", "Require", "Import", "Export",
    "From", "Load", "Declare", "Drop", "Quit", "Undo", "Back", "BackTo", "Restart", "Reset", "Set", "Unset",
    "Redirect", "Cd", "Extraction", "Qed", "Defined", "Save", "Proof",
)  # fmt: skip
#: read-only queries the model may run
COQ_ALLOWED_QUERIES = (
    "Show", "Check", "Print", "About", "Locate", "Search", "SearchPattern", "SearchRewrite", "SearchHead", "Compute",
    "Eval",
)  # fmt: skip
#: every capitalised first word outside this list is a vernacular command and is rejected
COQ_ALLOWED_COMMANDS = (*COQ_ALLOWED_QUERIES, "Unshelve")
#: tactics that close a goal without proving it
COQ_FORBIDDEN_TACTICS = ("admit", "Admitted", "give_up")

_SELECTOR = re.compile(r"^\s*" + _GOAL_SELECTOR + r"\s*:\s*")
_WORD = re.compile(r"[A-Za-z_][\w']*")


@attrs.frozen
class Checked:
    """A checked action: the pieces to send (one sentence each) or the reason it is rejected unsent."""

    pieces: tuple[str, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def check_coq_action(action: str) -> Checked:
    """Validate one Coq action and cut it into sentences; see the module docstring for the policy."""
    text = action.strip()
    if not text:
        return Checked(error="Empty tactic.")
    try:
        sentences, rest = coq_sentences(text)
    except SentenceError as exc:
        return Checked(error=f"Malformed tactic: {exc}.")
    if rest:  # spec: a missing final '.' is appended
        sentences.append(rest + ".")
    real = [s for s in sentences if not is_focus_marker(s)]
    if len(real) > 1:
        return Checked(
            error=f"One tactic per action: found {len(real)} sentences ({'; '.join(_short(s) for s in real[:3])}). "
            "Separate tactics with ' || ' or combine them with ';' into one sentence."
        )
    if real:
        problem = coq_policy_error(real[0])
        if problem:
            return Checked(error=problem)
    return Checked(pieces=tuple(sentences))


def coq_policy_error(sentence: str) -> str | None:
    """Why ``sentence`` may not be sent to the prover, or None when it may."""
    plain = strip_coq_comments(sentence)
    words = set(_WORD.findall(plain))
    for bad in COQ_FORBIDDEN_TACTICS:
        if bad in words:
            return f"'{bad}' is not allowed: the proof must be complete (no admit, give_up or Admitted)."
    body = _SELECTOR.sub("", plain, count=1).lstrip()
    if body.startswith("#"):
        return "Attributes (#[...]) are not allowed; send a tactic."
    first = _WORD.match(body)
    if first is None:
        return None  # a tactic expression starting with '(' or '[' etc.; the prover judges it
    word = first.group(0)
    if word in COQ_FORBIDDEN_COMMANDS:
        return f"The command '{word}' is not allowed: send proof tactics only (the proof closes automatically)."
    if word[0].isupper() and word not in COQ_ALLOWED_COMMANDS:
        return (
            f"'{word}' looks like a vernacular command, which is not allowed; send a tactic "
            f"(allowed: {', '.join(COQ_ALLOWED_COMMANDS)})."
        )
    return None


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- the Lean 4 tactic policy ----------------------------------------------------------------------------------------
#: tokens that fake a proof or escape into meta-programming / IO
LEAN_FORBIDDEN = (
    "sorry", "admit", "run_tac", "run_cmd", "run_elab", "run_meta", "#eval", "#exit", "#print", "IO", "unsafe",
    "implemented_by", "extern", "elab", "macro", "syntax", "import", "axiom",
)  # fmt: skip
_LEAN_TOKEN = re.compile(r"#?[A-Za-z_][\w'!?]*")


def strip_lean_comments(text: str) -> str:
    """``text`` with Lean comments removed and string contents blanked."""
    out, i, n = [], 0, len(text)
    while i < n:
        skip = _skip_literal(text, i, "lean")
        if skip is not None:
            out.append('""' if text[i] == '"' else " ")
            i = skip
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def check_lean_tactic(action: str) -> Checked:
    """Validate one Lean 4 tactic: non-empty, none of ``LEAN_FORBIDDEN`` as a token outside strings/comments."""
    text = action.strip()
    if not text:
        return Checked(error="Empty tactic.")
    tokens = set(_LEAN_TOKEN.findall(strip_lean_comments(text)))
    for bad in LEAN_FORBIDDEN:
        if bad in tokens:
            return Checked(
                error=f"'{bad}' is not allowed: send proof tactics only (no sorry/admit, no meta-programming)."
            )
    return Checked(pieces=(text,))
