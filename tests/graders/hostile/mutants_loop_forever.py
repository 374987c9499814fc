# Attack (mutants): a check that never returns, on every builder it is given.
def predict_catches():
    return {}


def check_builder(builder):
    while True:
        pass
