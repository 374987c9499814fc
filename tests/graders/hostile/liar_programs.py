# Attack: return GA-2 "programs" the grader must run itself: a list too long to send, a dict that
# lies about what it is, instructions whose fields are not integers or not fields at all, an
# endless run of valid instructions, and an object whose __len__ and __iter__ lie.


class LyingDict(dict):
    def get(self, key, default=None):
        return "MM"

    def __contains__(self, key):
        return True


class LyingList:
    def __len__(self):
        return 3

    def __iter__(self):
        while True:
            yield {"op": "LD", "dst": 0, "src": 0, "len": 4096}


def attention_tail(L, P):
    kind = L % 6
    if kind == 0:
        return [{"op": "LD", "dst": 0, "src": 0, "len": 4096}] * 200_000       # past what the channel sends
    if kind == 1:
        return [LyingDict(op="ST", src=0, dst=0, len=16)]
    if kind == 2:
        return [{"op": "MM", "dst": 2848.0, "A": True, "B": "1792", "M": None}]
    if kind == 3:
        return [{"op": "SM", "dst": 2912, "src": 2880, "len": 10 ** 4000}]
    if kind == 4:
        return [{"op": "LD", "dst": 0, "src": 0, "len": 4096}] * 1000            # valid, and far too many
    return LyingList()
