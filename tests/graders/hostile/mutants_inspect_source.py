# Attack (mutants): read the source text of the builder it is given (to compare it with the
# course's), through inspect, linecache, the code's file name, the module's loader or file.
import inspect
import linecache


def predict_catches():
    return {}


def _source(builder):
    texts = []
    for getter in (lambda: inspect.getsource(builder), lambda: inspect.getsource(builder.program),
                   lambda: inspect.getsource(builder.attention_tail),
                   lambda: "".join(linecache.getlines(builder.program.__code__.co_filename)),
                   lambda: open(builder.program.__code__.co_filename).read(),
                   lambda: open(builder.__file__).read(),
                   lambda: builder.__loader__.get_source(builder.__name__),
                   lambda: builder.__spec__.loader.get_source(builder.__name__),
                   lambda: builder.program.__doc__ or "", lambda: builder.__doc__ or ""):
        try:
            texts.append(getter() or "")
        except Exception:
            pass
    return "".join(texts)


def check_builder(builder):
    if "def " in _source(builder) or "decode step" in _source(builder):
        return True            # it had the text: it could compare it with the course's
    raise RuntimeError("MUTANTS-SOURCE-MARK: no source text")
