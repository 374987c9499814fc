"""Diagrams of the serving engine for chapters 5 and 7: what a batch's cache holds, what padding
adds, and the tree a beam search grows.  Each draws on a matplotlib axis from the engine's own
numbers (lengths, a generation's trace); the chapter passes the data and says what it shows.

Like the rest of ``coursebook``, importing this module imports neither numpy nor matplotlib.
"""
from __future__ import annotations

PROMPT = "tab:blue"
GENERATED = "tab:orange"
UNUSED = "0.85"
PADDING = "tab:red"


def draw_cache_rows(ax, prompt_lengths, generated, max_len: int, title: str = "", finished=None,
                    labels=None) -> None:
    """One bar per sequence over the cache's L_max positions: the prompt's positions, the generated
    ones, and the rest of the row, allocated and never used.  ``finished[b]`` true marks a row
    that stopped at EOS; ``labels`` names the rows (default "sequence b")."""
    n = len(prompt_lengths)
    for b, (p, g) in enumerate(zip(prompt_lengths, generated)):
        y = n - 1 - b
        ax.barh(y, p, color=PROMPT, height=0.7, label="prompt" if b == 0 else None)
        if g:
            ax.barh(y, g, left=p, color=GENERATED, height=0.7, label="generated" if b == 0 else None)
        ax.barh(y, max_len - p - g, left=p + g, color=UNUSED, height=0.7, hatch="//", edgecolor="white",
                label="allocated, unused" if b == 0 else None)
        if finished is not None and finished[b]:
            ax.text(p + g + max_len * 0.01, y, "EOS", va="center", fontsize=8)
    labels = [f"sequence {b}" for b in range(n)] if labels is None else list(labels)
    ax.set_yticks(range(n), list(reversed(labels)))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, fontsize=8)
    ax.set_xlim(0, max_len)
    ax.set_xlabel(f"position in the cache (L_max = {max_len:,})")
    ax.grid(False)
    if title:
        ax.set_title(title)


def draw_padding(ax, lengths, title: str = "") -> None:
    """Each prompt's tokens, and the padding that brings it to the longest (what a rectangular
    batch computes besides)."""
    longest = max(lengths)
    n = len(lengths)
    for b, t in enumerate(lengths):
        y = n - 1 - b
        ax.barh(y, t, color=PROMPT, height=0.7)
        if t < longest:
            ax.barh(y, longest - t, left=t, color="none", edgecolor=PADDING, hatch="xx", height=0.7)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=PROMPT, label="prompt tokens"),
               Patch(facecolor="none", edgecolor=PADDING, hatch="xx", label="padding")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=8)
    ax.set_yticks(range(n), [f"prompt {b}" for b in reversed(range(n))])
    ax.set_xlabel("tokens")
    ax.grid(False)
    if title:
        ax.set_title(title)


def beam_histories(trace) -> list[list[list[int]]]:
    """The running beams' new tokens after each step of a ``beam_search`` trace: follow every
    beam's parent back to the step before (the same gather the cache's reorder does, on lists)."""
    histories, previous = [], [[]]
    for step in trace:
        current = [previous[p] + [tok] for p, tok in zip(step["parents"], step["tokens"])]
        histories.append(current)
        previous = current
    return histories


def finish_steps(trace) -> list[int]:
    """The steps of a ``beam_search`` trace at which hypotheses finished and were kept: those
    whose list of finished scores (the K best so far) holds a score the step before did not."""
    steps, before = [], []
    for t, step in enumerate(trace):          # step t of the trace is its t-th entry
        if set(step["finished"]) - set(before):
            steps.append(t)
        before = step["finished"]
    return steps


def _path_to(histories, tokens):
    """(step, slot) of each token of ``tokens`` along the running beams, as far as they go."""
    path = []
    for t in range(len(tokens)):
        if t >= len(histories):
            break
        slot = next((i for i, h in enumerate(histories[t]) if h == list(tokens[: t + 1])), None)
        if slot is None:
            break
        path.append((t, slot))
    return path


def draw_beam_tree(ax, trace, best=None, max_new_tokens=None, title: str = "") -> None:
    """The running beams after each step (a column per step, a row per beam), each joined to the
    beam of the step before it continues (its parent: the cache row it is copied from), labelled
    with its new token.  Steps are counted from 0, as the trace counts them: step t chooses the
    (t + 1)-th new token; the prompt, prefilled before step 0, sits left of it.  Red squares mark
    the steps where hypotheses finished (``finish_steps``), with how many are kept then; ``best``
    (the returned tokens) is drawn in black, ending with a square when it finished at EOS or at
    the length limit.  A legend under the axis says what each mark is."""
    from matplotlib.lines import Line2D

    histories = beam_histories(trace)
    K = len(trace[0]["parents"])
    last_all_end = max_new_tokens is not None and len(trace) == max_new_tokens
    shown = len(trace) - 1 if last_all_end else len(trace)
    prompt_x = -1
    ax.plot([prompt_x], [0], "o", color="black", ms=7)
    ax.text(prompt_x, 0.28, "prompt", ha="center", fontsize=8)
    for t in range(shown):
        for i, (p, tok) in enumerate(zip(trace[t]["parents"], trace[t]["tokens"])):
            ax.plot([t - 1, t], [0 if t == 0 else -p, -i], color="0.7", lw=1, zorder=1)
            ax.plot([t], [-i], "o", color="tab:blue", ms=6, zorder=2)
            ax.text(t, -i + 0.2, str(tok), ha="center", fontsize=7)
    handles = [Line2D([], [], marker="o", ls="", color="tab:blue", ms=6,
                      label="running beam (its new token above)"),
               Line2D([], [], marker="s", ls="", color="tab:red", ms=6,
                      label="hypotheses finished (how many kept)")]
    for t in finish_steps(trace):
        ax.plot([t], [0.75], "s", color="tab:red", ms=6)
        ax.text(t, 0.95, f"{len(trace[t]['finished'])}", ha="center", fontsize=7, color="tab:red")
    if best:
        path = _path_to(histories[:shown], best)
        xs = [prompt_x] + [t for t, _ in path]
        ys = [0] + [-s for _, s in path]
        handles.append(Line2D([], [], color="black", lw=2, label="the returned hypothesis"))
        if len(path) < len(best):              # it finished: its last token is not a running beam
            end_x = len(best) - 1
            ax.plot([xs[-1], end_x], [ys[-1], -K + 0.2], color="black", lw=2)
            ax.plot([end_x], [-K + 0.2], "s", color="black", ms=8)
            ax.text(end_x, -K - 0.15, str(best[-1]), ha="center", fontsize=8)
            handles.append(Line2D([], [], marker="s", ls="", color="black", ms=8,
                                  label="its last token (it ends there)"))
        ax.plot(xs, ys, color="black", lw=2, zorder=3)
    ax.set_xticks(range(prompt_x, len(trace)), ["prefill"] + [str(t) for t in range(len(trace))])
    ax.set_yticks([-i for i in range(K)], [f"beam {i}" for i in range(K)])
    ax.set_xlabel("step, counted from 0 (step t chooses new token number t + 1)")
    ax.set_xlim(prompt_x - 0.5, len(trace) - 0.5)
    ax.set_ylim(-K - 0.4, 1.2)
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=2, fontsize=8)
    ax.grid(False)
    if title:
        ax.set_title(title)
