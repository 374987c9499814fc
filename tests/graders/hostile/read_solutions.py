# Attack: read or import the reference answers from disk, and use them.
import glob
import json
import os
import sys

import numpy as np


def _roots():
    roots = ["/work/main", os.path.expanduser("~"), os.getcwd(), "/"]
    here = os.path.abspath(__file__)
    for _ in range(6):
        here = os.path.dirname(here)
        roots.append(here)
    roots.append(os.path.dirname(sys.prefix))                      # the venv lives in the checkout
    roots += [p for p in sys.path if p]
    return roots


def _from_notebook(path):
    with open(path) as f:
        nb = json.load(f)
    env = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            try:
                exec("".join(cell["source"]), env)
            except Exception:
                pass
    return env.get("softmax")


def _find():
    for module in ("graders.exercises.softmax", "lessons.attention", "kvcache", "solutions"):
        try:
            mod = __import__(module, fromlist=["x"])
            fn = getattr(mod, "reference", None) or getattr(mod, "softmax", None)
            if fn:
                return fn
        except Exception:
            pass
    for root in _roots():
        for pattern in ("solutions/softmax.ipynb", "*/solutions/softmax.ipynb", "graders/exercises/softmax.py"):
            for path in glob.glob(os.path.join(root, pattern)):
                try:
                    if path.endswith(".ipynb"):
                        fn = _from_notebook(path)
                    else:
                        env = {}
                        exec(open(path).read(), env)
                        fn = env.get("reference")
                    if fn:
                        return fn
                except Exception:
                    pass
    for top, dirs, files in os.walk("/"):                          # a bounded search of the disk
        if top == "/":
            dirs[:] = [d for d in dirs if d not in ("usr", "proc", "sys", "dev", "lib", "bin")]
        if top.count(os.sep) > 4:
            dirs[:] = []
        if os.path.basename(top) == "solutions" and "softmax.ipynb" in files:
            fn = _from_notebook(os.path.join(top, "softmax.ipynb"))
            if fn:
                return fn
    return None


def softmax(scores):
    fn = _find()
    if fn is None:
        raise FileNotFoundError("no reference answers visible")
    return fn(scores)
