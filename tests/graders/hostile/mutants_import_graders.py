# Attack (mutants): import the grader (its hidden wheats and chaffs) or the real builder, by name
# or through the paths the sandbox's own files reveal.
import os
import sys


def predict_catches():
    return {}


def _grader():
    try:
        from graders.exercises import mutants
        return mutants
    except ImportError:
        pass
    for arg in list(sys.argv) + [getattr(sys.modules.get("__main__"), "__file__", "") or ""]:
        folder = os.path.dirname(os.path.dirname(os.path.abspath(str(arg))))
        if os.path.isdir(os.path.join(folder, "graders", "exercises")):
            sys.path.insert(0, folder)
            try:
                from graders.exercises import mutants
                return mutants
            except ImportError:
                pass
    return None


def check_builder(builder):
    grader = _grader()
    if grader is None:
        raise ImportError("MUTANTS-IMPORT-MARK: no grader in reach")
    return True                # with the grader in reach, it could look the builder up
