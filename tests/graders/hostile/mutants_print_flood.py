# Attack (mutants): flood the output with what the check learned of the builder, hoping it
# reaches the feedback (the marker must appear nowhere in the result).
import sys

MARK = "MUTANTS-FLOOD-MARK-" + "7f3a"


def predict_catches():
    print(MARK * 1000)
    return {}


def check_builder(builder):
    names = sorted(vars(builder))
    for _ in range(2000):
        sys.stdout.write(MARK + " " + " ".join(names) + "\n")
        sys.stderr.write(MARK + "\n")
    raise RuntimeError(MARK + " " + " ".join(names))
