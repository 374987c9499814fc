# Attack: lone surrogates in what reaches the feedback: an exception's message and the name of the
# function it was raised in, on every test.
def _renamed(fn):
    fn.__code__ = fn.__code__.replace(co_name="\udc80\udcff")
    return fn


@_renamed
def softmax(scores):
    raise ValueError("no answer \udc80 here \ud800")
