# Attack: exit with status 0 while being loaded (a default argument is evaluated at import).
import sys


def softmax(scores, _=sys.exit(0)):
    return scores
