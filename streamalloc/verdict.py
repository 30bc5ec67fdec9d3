"""The verdict as data: a lab check's word, and a lesson's note to the runner, beside the prose people read.

    verdict.show(verdict.Verdict(verdict.SOLVED, prose="All checks passed."))  # checks.Report.finish; a lesson's note
    verdict.read(outputs)          # the last Verdict among an executed cell's outputs, or None
    verdict.of_lab(path)           # an executed lab's check: (word, finding), ('', '') where no check ran
    verdict.note(path)             # an executed notebook's note to the runner (NOT_MEASURED or REPLAYED), or None
    verdict.of_rows(rows)          # {word: [notebook, ...]} of a summary's edited labs (the instructor's page)

`show` displays a Verdict: in a notebook, one display output whose `text/plain` is the prose and whose MIME, the
course's own (application/vnd.streamalloc.verdict+json), holds the word and the finding as JSON; elsewhere it prints
the prose. The runner, the learners' preflight, the instructor's page and the tests read the data, never the prose,
so that rewording the prose changes no verdict, and a program (whatever it prints, a verdict's words included: its
lines are stream output) cannot make a lab "solved". What it does not guard against: a learner's own cell displaying
this MIME type, or code of the learner's that replaces the check in the kernel's process (AUTHORING.md says so).
"""
from __future__ import annotations

import dataclasses

MIME = "application/vnd.streamalloc.verdict+json"

# a lab check's words (an edited lab's row in the runner's summary)
SOLVED, IN_PROGRESS, UNVERIFIED = "solved", "in progress", "not verified"
# a lesson's notes to the runner: nothing measured here (a row "not measured"), or a recording shown on a live machine
NOT_MEASURED, REPLAYED = "not measured", "replayed"
LAB_WORDS, NOTE_WORDS = (SOLVED, IN_PROGRESS, UNVERIFIED), (NOT_MEASURED, REPLAYED)
REPLAYED_HERE = "replayed, not run live: "  # how the runner's summary says a REPLAYED note


@dataclasses.dataclass
class Verdict:
    word: str  # one of LAB_WORDS or NOTE_WORDS
    finding: str = ""  # the first thing still wrong, what was not verified, why nothing was measured
    prose: str = ""  # what people read: shown as text, never read by a program

    def __post_init__(self):
        if self.word not in LAB_WORDS + NOTE_WORDS:
            raise ValueError(f"{self.word!r} is not a verdict: one of {', '.join(LAB_WORDS + NOTE_WORDS)}")

    def data(self) -> dict:
        return {"word": self.word, "finding": self.finding}

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {MIME: self.data(), "text/plain": self.prose}

    def __str__(self) -> str:  # what display() prints outside a notebook
        return self.prose


def show(verdict: Verdict) -> None:
    """Display it: in a notebook the data and the prose in one output; elsewhere the prose, printed."""
    try:
        from IPython import display
    except ImportError:
        print(verdict)
        return
    display.display(verdict)


def from_output(output) -> Verdict | None:
    """The Verdict an nbformat output holds (display_data or execute_result of the course's MIME type), or None."""
    data = (output.get("data") or {}).get(MIME) if output.get("output_type") in ("display_data", "execute_result") \
        else None
    if not isinstance(data, dict) or data.get("word") not in LAB_WORDS + NOTE_WORDS:
        return None
    return Verdict(data["word"], str(data.get("finding", ""))[:1000], str((output.get("data") or {}).get(
        "text/plain", "")))


def read(outputs, words=LAB_WORDS) -> Verdict | None:
    """The last Verdict with one of `words` among a cell's outputs, or None."""
    found = [v for v in map(from_output, outputs) if v is not None and v.word in words]
    return found[-1] if found else None


def _cells(path):
    import nbformat

    return nbformat.read(str(path), as_version=4).cells


def is_check(cell) -> bool:
    """A lab's check cell: tagged `check` (a solution's) or raising LabIncomplete by design (a lab's)."""
    meta = cell.get("metadata", {})
    return "check" in meta.get("tags", []) or meta.get("expected_exception") == "LabIncomplete"


def clip(text: str, most: int = 300) -> str:
    """A finding for a table cell: whole where it fits, else cut after its last whole sentence or clause within
    `most` characters (a word, where none ends past half of it), and marked cut with " …"."""
    if len(text) <= most:
        return text
    cut = text[:most]
    end = max(cut.rfind(sep) for sep in (". ", "; ", ": "))
    if end > most // 2:
        return cut[:end + 1] + " …"
    space = cut.rfind(" ")
    return (cut[:space] if space > 0 else cut) + " …"


def of_lab(path) -> tuple[str, str]:
    """An executed lab's check, in a word and its finding, from the check cell's data: (SOLVED, ''), (IN_PROGRESS,
    the first thing still wrong), (UNVERIFIED, what it could not verify here); ('', '') where no check ran. A check
    that ran and gave no verdict (it raised before its end, or its output is gone) is UNVERIFIED, never solved."""
    for cell in _cells(path):
        if cell.cell_type != "code" or cell.get("execution_count") is None or not is_check(cell):
            continue
        outputs = cell.get("outputs", [])
        verdict = read(outputs)
        if verdict is not None:
            return verdict.word, clip(verdict.finding)
        error = next((o for o in outputs if o.get("output_type") == "error"), None)
        raised = f" (it raised {error.get('ename', 'an error')})" if error else ""
        return UNVERIFIED, f"the check gave no verdict{raised}"
    return "", ""


def note(path) -> Verdict | None:
    """An executed notebook's last note to the runner (NOT_MEASURED or REPLAYED), from any cell, or None."""
    found = [v for cell in _cells(path) if cell.cell_type == "code"
             for v in [read(cell.get("outputs", []), NOTE_WORDS)] if v is not None]
    return found[-1] if found else None


def of_rows(rows) -> dict[str, list[str]]:
    """{word: [notebook, ...]} for the edited labs of a runner's summary rows (their "lab" word), in LAB_WORDS'
    order; other rows, and words that are not a verdict, are left out."""
    found = {w: [] for w in LAB_WORDS}
    for row in rows:
        if isinstance(row, dict) and row.get("lab") in found:
            found[row["lab"]].append(str(row.get("notebook", "?")))
    return {w: nbs for w, nbs in found.items() if nbs}
