// An exercise page's editor and Run button: the reader writes the answer cell here and runs the
// exercise's public checks in the browser, with no kernel and no network.
//
// The page (built by tools/sphinx_exercises.py) loads this module with data-exercise="NAME"; it
// reads _static/exercise/NAME.ipynb (tools/site_exercises.py: the exercise notebook, whose answer
// cells are the starter and whose metadata names its public-checks cell and the earlier exercises
// whose answers GA-2 runs) and puts the editor in place of
// the notebook's answer cell.  Python itself is python-runtime.js, loaded on the first Run.
//
// window.courseExercise, for automation and tests (the buttons call the same functions):
//   setCode(text), getCode(), run() -> Promise of the output text the page shows, stop(),
//   reset(), notebook() -> the notebook "Download notebook" saves, as JSON text.
import { EditorState, Prec } from "../vendor/codemirror/codemirror-state.js";
import { EditorView, keymap, lineNumbers, highlightActiveLine, drawSelection } from "../vendor/codemirror/codemirror-view.js";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "../vendor/codemirror/codemirror-commands.js";
import { indentUnit, syntaxHighlighting, defaultHighlightStyle, bracketMatching } from "../vendor/codemirror/codemirror-language.js";
import { python } from "../vendor/codemirror/codemirror-lang-python.js";

const STATIC = new URL("../", import.meta.url).href;
const STORE = (name) => `kvcourse.exercise.${name}.code`;
const OTHER_PARTS = "# Your answer to every part of this exercise is in the answer cell above\n" +
  "# (written on the course's site).\n";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

function megabytes(bytes) { return (bytes / 1e6).toFixed(1); }

function saved(name) {
  try { return localStorage.getItem(STORE(name)); } catch { return null; }
}

function save(name, text) {
  try { localStorage.setItem(STORE(name), text); } catch { /* private mode: the editor still works */ }
}

function source(cell) { return Array.isArray(cell.source) ? cell.source.join("") : String(cell.source || ""); }

function isAnswer(cell) {
  return cell.cell_type === "code" && ((cell.metadata && cell.metadata.tags) || []).includes("answer");
}

// An exercise as its page knows it, from its notebook (tools/site_exercises.py): the starter is
// the answer cells, the rest is in the metadata.
async function readExercise(name) {
  const response = await fetch(new URL(`exercise/${name}.ipynb`, STATIC));
  if (!response.ok) throw new Error(`exercise/${name}.ipynb: ${response.status}`);
  const notebook = await response.json();
  const about = notebook.metadata.kvcourse;
  return {
    name, chapter: about.chapter, notebook,
    functions: about.page.functions,
    installs: about.page.installs,
    checks: source(notebook.cells[about.page.checks_cell]),
    starter: notebook.cells.filter(isAnswer).map((c) => source(c).replace(/\n+$/, "")).join("\n\n\n") + "\n",
  };
}

// The notebook with `code` in its answer cell (and the other answer cells pointing there).
function notebookWith(data, code) {
  const nb = JSON.parse(JSON.stringify(data.notebook));
  delete nb.metadata.kvcourse.page;
  let first = true;
  for (const cell of nb.cells) {
    if (!isAnswer(cell)) continue;
    cell.source = first ? code : OTHER_PARTS;
    first = false;
  }
  return JSON.stringify(nb, null, 1) + "\n";
}

// An earlier exercise's notebook, as the reader's answer on its page makes it (the starter when
// the reader has written nothing there yet), for ga2.install_from.
function earlierNotebook(data) {
  return JSON.stringify({
    cells: [{ cell_type: "code", execution_count: null, metadata: { tags: ["answer"] }, outputs: [],
              source: saved(data.name) ?? data.starter }],
    metadata: { kvcourse: { chapter: data.chapter, exercise: data.name } },
    nbformat: 4, nbformat_minor: 5,
  });
}

function runner(data) {
  return `import os, sys\n` +
    `os.chdir("/home/reader")\n` +
    `if "/course/course.zip" not in sys.path:\n    sys.path.insert(0, "/course/course.zip")\n` +
    `from public_checks import browser as _page\n` +
    `_page.run(${JSON.stringify(data.name)}, ${JSON.stringify(data.installs.map((n) => `${n}.ipynb`))})\n` +
    `del _page\n`;
}

class ExercisePage {
  constructor(data, earlier) {
    this.data = data;
    this.earlier = earlier;
    this.python = null;
    this.pending = null;       // the Promise of the run in progress
    this.build();
  }

  build() {
    const { data } = this;
    this.editor = new EditorView({
      parent: el("div"),
      state: EditorState.create({
        doc: saved(data.name) ?? data.starter,
        extensions: [
          lineNumbers(), highlightActiveLine(), drawSelection(), history(), bracketMatching(),
          indentUnit.of("    "), EditorState.tabSize.of(4), python(),
          syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
          Prec.highest(keymap.of([{ key: "Mod-Enter", run: () => { this.run(); return true; } }])),
          keymap.of([indentWithTab, ...defaultKeymap, ...historyKeymap]),
          EditorView.updateListener.of((update) => { if (update.docChanged) save(data.name, this.getCode()); }),
          EditorView.contentAttributes.of({ "aria-label": `Your answer to the exercise ${data.name}` }),
        ],
      }),
    });
    const button = (label, action, control) => el("button", { type: "button", class: "course-exercise-button",
      "data-control": control, onclick: () => action() }, label);
    this.runButton = button("Run", () => this.run(), "run");
    this.stopButton = button("Stop", () => this.stop(), "stop");
    this.stopButton.disabled = true;
    this.progress = el("progress", { class: "course-exercise-progress", max: "1", value: "0", hidden: "" });
    this.status = el("span", { class: "course-exercise-status", "aria-live": "polite" });
    this.output = el("pre", { class: "course-exercise-output", "data-exercise-output": "", hidden: "" });
    const toolbar = el("div", { class: "course-exercise-toolbar" },
      this.runButton, this.stopButton,
      button("Reset", () => this.reset(), "reset"),
      button("Download notebook", () => this.download(), "download"),
      el("span", { class: "course-exercise-hint" }, "Run (Ctrl+Enter) tests your code with the public checks."),
      this.progress, this.status);
    const parts = [this.editor.dom.parentNode, toolbar];
    if (data.installs.length) {
      const links = data.installs.map((n) => `<a href="${n}.html">${n}</a>`).join(" and ");
      const note = el("p", { class: "course-exercise-note" });
      note.innerHTML = `GA-2 on this page runs your answer to ${links}, as written on ` +
        `${data.installs.length > 1 ? "their pages" : "its page"} in this browser (the notebook's ` +
        `<code>ga2.install_from</code>).`;
      parts.push(note);
    }
    parts.push(this.output);
    this.root = el("div", { class: "course-exercise", "data-exercise": data.name }, ...parts);
    this.place();
  }

  // In place of the notebook's answer cell; the other answer cells (an exercise in parts) are
  // folded into the one editor.
  place() {
    const cells = [...document.querySelectorAll("div.cell.tag_answer")];
    if (cells.length) {
      cells[0].replaceWith(this.root);
      for (const cell of cells.slice(1)) cell.hidden = true;
    } else {
      (document.querySelector("main article, main, body")).append(this.root);
    }
  }

  getCode() { return this.editor.state.doc.toString(); }

  setCode(text) {
    this.editor.dispatch({ changes: { from: 0, to: this.editor.state.doc.length, insert: String(text) } });
    save(this.data.name, this.getCode());
  }

  reset() { this.setCode(this.data.starter); }

  notebook() { return notebookWith(this.data, this.getCode()); }

  download() {
    const blob = new Blob([this.notebook()], { type: "application/x-ipynb+json" });
    const link = el("a", { href: URL.createObjectURL(blob), download: `${this.data.name}.ipynb` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  }

  show(text) {
    this.output.hidden = false;
    this.output.textContent = text;
  }

  async runtime() {
    if (this.python) return this.python;
    const module = await import("../runtime/python-runtime.js");
    const why = module.unsupported();
    if (why) throw new Error(why);
    this.python = new module.PythonRuntime(STATIC, {
      onProgress: (loaded, total) => {
        this.progress.hidden = false;
        this.progress.max = total || 1;
        this.progress.value = loaded;
        this.status.textContent = `Loading Python: ${megabytes(loaded)} of ${megabytes(total)} MB`;
      },
    });
    return this.python;
  }

  // One sentence: what cannot run, why, and where the same checks run.
  unavailable(reason) {
    return `This browser cannot run Python on the page (${reason}): download the notebook and run ` +
      `its public checks in JupyterLab (make lab).\n`;
  }

  run() {
    if (this.pending) return this.pending;
    this.pending = this._run().finally(() => {
      this.pending = null;
      this.runButton.disabled = false;
      this.stopButton.disabled = true;
    });
    return this.pending;
  }

  async _run() {
    this.runButton.disabled = true;
    this.stopButton.disabled = false;
    this.show("");
    let python;
    try {
      python = await this.runtime();
    } catch (err) {
      const text = this.unavailable(String(err.message || err).replace(/\.$/, ""));
      this.show(text);
      return text;
    }
    const files = { "answer.py": this.getCode(), "checks.py": this.data.checks };
    for (const data of this.earlier) files[`${data.name}.ipynb`] = earlierNotebook(data);
    let shown = "";
    const result = await python.run(runner(this.data), {
      files,
      onOutput: (text) => {
        shown += text;
        this.show(shown);
        this.status.textContent = "Running";
        this.progress.hidden = true;
      },
    });
    this.progress.hidden = true;
    this.status.textContent = "";
    let text = result.output;
    if (result.status === "stopped") text += (text && !text.endsWith("\n") ? "\n" : "") + "Stopped.\n";
    else if (result.status === "crashed") {
      text += (text && !text.endsWith("\n") ? "\n" : "") +
        `Python stopped: ${result.message}. Run starts it again.\n`;
    } else if (result.status === "unavailable") text = this.unavailable(result.message.replace(/\.$/, ""));
    this.show(text);
    return text;
  }

  stop() {
    if (this.python) this.python.stop();
  }
}

async function main() {
  const script = document.querySelector("script[data-exercise]");
  if (!script) return;
  const name = script.dataset.exercise;
  const data = await readExercise(name);
  const earlier = await Promise.all(data.installs.map(readExercise));
  const page = new ExercisePage(data, earlier);
  window.courseExercise = {
    setCode: (text) => page.setCode(text),
    getCode: () => page.getCode(),
    run: () => page.run(),
    stop: () => page.stop(),
    reset: () => page.reset(),
    notebook: () => page.notebook(),
  };
  document.dispatchEvent(new CustomEvent("course-exercise-ready", { detail: { name } }));
}

main();
