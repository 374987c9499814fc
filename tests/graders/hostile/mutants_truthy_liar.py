# Attack (mutants): answer with objects that claim to be anything: a "dict" that equals every
# answer, and a verdict that is truthy and equal to True and to False alike.
class Yes:
    def __bool__(self):
        return True

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class Everything(dict):
    def __eq__(self, other):
        return True

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        return Yes()


def predict_catches():
    return Everything()


def check_builder(builder):
    return Yes()
