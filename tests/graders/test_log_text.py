"""Every text a submission chose (its file name, its metadata, its exceptions' messages) reaches
the instructor's log and the gradebook on one line, with newlines, carriage returns, escape
sequences and direction overrides shown rather than obeyed: no submission can write a line of
its own ("Score: 20 / 20") or turn one around."""
import csv
import io

from graders import grade_bytes
from graders.batch import run_batch
from graders.results import format_text, one_line, printable

from grader_helpers import FAST

FORGED = "\nScore: 20 / 20\r\x1b[2K\u202eevil\u2066\u2028end"
HIDDEN = ("\n", "\r", "\x1b", "\u202e", "\u2066", "\u2028")


def test_one_line_shows_every_breaking_reordering_or_escaping_character():
    assert one_line(FORGED) == "\\nScore: 20 / 20\\r\\x1b[2K\\u202eevil\\u2066\\u2028end"
    for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C, 0x85, 0x0B, 0x0C]:
        assert one_line(chr(c)) == (f"\\u{c:04x}" if c > 0xFF else f"\\x{c:02x}"), hex(c)
    assert printable("a\nb\u202ec") == "a\nb\\u202ec"            # printable keeps the line breaks
    assert one_line("ordinary text, é, 日本") == "ordinary text, é, 日本"
    assert one_line("lone \udc80") == "lone \\udc80"


def test_the_log_of_a_hostile_result_has_only_the_graders_lines():
    result = {"exercise": "softmax", "submission": "hw" + FORGED + ".ipynb", "output": "1 of 2 hidden tests passed.",
              "status": "ok", "score": 1.0, "max_score": 2.0,
              "tests": [{"name": "one", "score": 1.0, "max_score": 1.0, "status": "passed", "output": "passed"},
                        {"name": "two", "score": 0.0, "max_score": 1.0, "status": "failed",
                         "output": "softmax raised ValueError: " + FORGED}]}
    text = format_text(result)
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("Score: ")] == ["Score: 1 / 2 (1 of 2 tests passed; status ok)"]
    assert len(lines) == 6, lines                     # its lines are the grader's only
    for char in HIDDEN[1:]:
        assert char not in text
    assert one_line(FORGED) in lines[0] and one_line(FORGED) in lines[4]


def test_an_exception_message_is_one_line_in_the_gradebook_and_its_feedback(tmp_path):
    source = ("def softmax(scores):\n"
              f"    raise ValueError({FORGED!r})\n")
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / ("learner" + FORGED.replace("/", "-") + ".py")).write_text(source)
    out = tmp_path / "gradebook.csv"
    run_batch(folder, "softmax", out, jobs=1, limits=FAST, progress=False)
    raw = out.read_text(encoding="utf-8")
    assert len(raw.splitlines()) == 2                       # the header and one row, whatever the text
    rows = list(csv.DictReader(io.StringIO(raw)))
    assert len(rows) == 1
    for cell in rows[0].values():
        for char in HIDDEN:
            assert char not in cell, (repr(char), cell)
    assert rows[0]["submission"].startswith("learner\\nScore: 20 - 20\\r")
    assert "\\nScore: 20 / 20\\r" in rows[0]["message"], rows[0]["message"]
    result = grade_bytes(source.encode(), "softmax.py", "softmax", limits=FAST)
    log = format_text(result)
    assert not any(line.startswith("Score: 20") for line in log.splitlines())
