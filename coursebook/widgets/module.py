"""A widget's ES module as the browser receives it: the widget's file with the library inlined.

A course widget is one ES module file (``calculator.js``...) that may import from one library,
``course-widgets`` (``library.js`` beside this file)::

    import { h, field, stackedBars } from "course-widgets";

The module travels as text in the widget's ``_esm`` trait, to JupyterLab through the kernel and
to the site inside the page's saved widget state, and the browser imports it from a ``blob:``
URL, where a relative or bare import cannot be resolved.  So ``bundle`` replaces that import line
by the library itself, wrapped in a function whose result gives exactly the imported names (what
an ``import`` would bind; the library's other names stay out of the widget's scope)::

    const { h, field, stackedBars } = (() => { ...library.js without "export"...; return {...}; })();

and refuses, with a message that says why, what would not work offline or in a saved page:
another import, a dynamic ``import()``, ``fetch``, a URL, or a ``</script``/``<!--`` (the page
embeds the module in a script element).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

__all__ = ["LIBRARY", "LIBRARY_CSS", "LIBRARY_NAME", "WidgetModuleError", "library_exports", "bundle",
           "stylesheet"]

HERE = Path(__file__).resolve().parent
LIBRARY = HERE / "library.js"
LIBRARY_CSS = HERE / "library.css"
LIBRARY_NAME = "course-widgets"

_IMPORT = re.compile(r'^[ \t]*import[ \t]*\{([^}]*)\}[ \t]*from[ \t]*(["\'])([^"\']+)\2[ \t]*;?[ \t]*$', re.M)
_OTHER_IMPORT = re.compile(r'^[ \t]*import\b|\bimport[ \t]*\(|^[ \t]*export\b[^\n]*\bfrom\b', re.M)
_EXPORT = re.compile(r'^export[ \t]+(?:async[ \t]+)?(?:function\*?|const|let|class)[ \t]+([A-Za-z_$][\w$]*)', re.M)
_NETWORK = re.compile(r'https?://(?!www\.w3\.org/2000/svg")|\bfetch[ \t]*\(|\bXMLHttpRequest\b|\bWebSocket\b|'
                      r'\bEventSource\b|\bsendBeacon\b')
_NAME = re.compile(r'^[A-Za-z_$][\w$]*$')


class WidgetModuleError(ValueError):
    """A widget's module cannot be sent to the browser as it is; the message says why."""


@lru_cache(maxsize=None)
def _library() -> tuple[str, tuple[str, ...]]:
    source = LIBRARY.read_text(encoding="utf-8")
    return source, tuple(_EXPORT.findall(source))


def library_exports() -> list[str]:
    """The names ``course-widgets`` exports, in the order of the file."""
    return list(_library()[1])


def _check(source: str, where: str) -> None:
    if "</script" in source.lower() or "<!--" in source:
        raise WidgetModuleError(f"{where}: '</script' and '<!--' cannot appear in a widget's module "
                                "(the page embeds it in a <script> element); split the string")
    found = _NETWORK.search(source)
    if found:
        raise WidgetModuleError(f"{where}: {found.group(0)!r}: a widget's module must not reach the network "
                                "(the site reads offline); put the data in a trait")


def bundle(path: str | Path) -> str:
    """The text of the ES module at ``path`` with its ``course-widgets`` import inlined."""
    path = Path(path)
    source = path.read_text(encoding="utf-8")
    where = path.name
    imports = [m for m in _IMPORT.finditer(source)]
    wanted: list[str] = []
    for m in imports:
        if m.group(3) != LIBRARY_NAME:
            raise WidgetModuleError(f"{where}: imports {m.group(3)!r}; a widget's module may import only from "
                                    f"{LIBRARY_NAME!r} (it is sent whole to the browser, which fetches nothing)")
        for name in (n.strip() for n in m.group(1).split(",")):
            if not name:
                continue
            if not _NAME.match(name):
                raise WidgetModuleError(f"{where}: import {name!r}: name the library's functions as they are "
                                        "(no 'as')")
            if name not in wanted:
                wanted.append(name)
    rest = _IMPORT.sub("", source)
    other = _OTHER_IMPORT.search(rest)
    if other:
        raise WidgetModuleError(f"{where}: {other.group(0).strip()!r}: a widget's module may import only "
                                f'with one line `import {{ ... }} from "{LIBRARY_NAME}";`')
    if not wanted:
        _check(rest, where)
        return rest
    library, exports = _library()
    unknown = [n for n in wanted if n not in exports]
    if unknown:
        raise WidgetModuleError(f"{where}: {LIBRARY_NAME} has no {', '.join(unknown)} "
                                f"(it exports {', '.join(exports)})")
    body = re.sub(r"^export[ \t]+", "", library, flags=re.M)
    prelude = (f"// {LIBRARY_NAME}, inlined by coursebook.widgets.module.bundle\n"
               f"const {{ {', '.join(wanted)} }} = (() => {{\n{body}\n"
               f"return {{ {', '.join(exports)} }};\n}})();\n")
    _check(prelude + rest, where)
    return prelude + rest


def stylesheet(*paths: str | Path) -> str:
    """The library's style sheet followed by the given ones (a widget's own ``.css`` files)."""
    parts = [LIBRARY_CSS.read_text(encoding="utf-8")]
    parts += [Path(p).read_text(encoding="utf-8") for p in paths]
    text = "\n".join(parts)
    if "</" in text:
        raise WidgetModuleError("a widget's style sheet cannot contain '</' (the page embeds it in a <script>)")
    return text
