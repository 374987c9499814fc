// Python in the reader's browser, behind one small interface: run this code with these files, get
// what it printed.  The exercise pages (exercise-page.js) use nothing else, so another runtime
// (Pyodide, the day numpy publishes wheels for it) can take this file's place.
//
//   import { PythonRuntime, unsupported } from ".../runtime/python-runtime.js";
//   unsupported()                 -> null, or why this browser cannot run it ("it lacks Web Workers")
//   const python = new PythonRuntime(staticUrl, { onProgress(loaded, total) {} });
//   await python.run(code, { files: { "name.ipynb": text }, onOutput(text) {} })
//                                 -> { output, status }   status: "finished", "stopped", "crashed"
//   python.stop()                 ends a run at once (the worker is terminated); the next run
//                                 starts a new one from the files already fetched
//
// Nothing is fetched until the first run: the module, the standard library and the course's
// packages (about 25 MB, gzipped), with onProgress told the bytes.  Runs are one at a time.

const FILES = {
  module: "vendor/runtime/python.wasm.gz",
  library: "vendor/runtime/python-stdlib.zip.gz",
  course: "exercise/course.zip",
};

export function unsupported() {
  const missing = [];
  if (typeof WebAssembly !== "object" || typeof WebAssembly.compileStreaming !== "function") missing.push("WebAssembly");
  if (typeof Worker !== "function") missing.push("Web Workers");
  if (typeof DecompressionStream !== "function") missing.push("DecompressionStream");
  if (!missing.length) return null;
  return `it lacks ${missing.join(", ")}`;
}

export class PythonRuntime {
  constructor(staticUrl, { onProgress } = {}) {
    this.urls = Object.fromEntries(Object.entries(FILES).map(([k, v]) => [k, new URL(v, staticUrl).href]));
    this.workerUrl = new URL("runtime/python-worker.js", staticUrl).href;
    this.onProgress = onProgress || (() => {});
    this.files = {};          // module, library, course: kept for the next worker
    this.worker = null;
    this.ready = null;        // a Promise of the started worker
    this.current = null;      // the run in progress: { output, onOutput, resolve }
  }

  _start() {
    if (this.ready) return this.ready;
    const worker = new Worker(this.workerUrl, { type: "module" });
    this.worker = worker;
    this.ready = new Promise((resolve, reject) => {
      worker.onmessage = (event) => {
        const m = event.data;
        if (m.type === "progress") this.onProgress(m.loaded, m.total);
        else if (m.type === "ready") {
          this.files = { module: m.module, library: m.library, course: m.course };
          resolve(worker);
        } else if (m.type === "failed") {
          this._drop(worker);
          reject(new Error(m.message));
        } else this._fromRun(worker, m);
      };
      worker.onerror = (event) => {
        event.preventDefault();
        const message = event.message || "the worker could not start";
        if (this.worker === worker && this.current) this._finish("crashed", message);
        this._drop(worker);
        reject(new Error(message));
      };
    });
    worker.postMessage({ type: "start", urls: this.urls, files: this.files });
    return this.ready;
  }

  _drop(worker) {
    worker.terminate();
    if (this.worker === worker) {
      this.worker = null;
      this.ready = null;
    }
  }

  _fromRun(worker, m) {
    if (worker !== this.worker || !this.current) return;
    if (m.type === "output") {
      this.current.output += m.text;
      this.current.onOutput(m.text);
    } else if (m.type === "done") {
      if (m.status === "crashed" || m.status === "exited") this._drop(worker);
      this._finish(m.status === "exited" ? "finished" : m.status, m.message);
    }
  }

  _finish(status, message) {
    const run = this.current;
    if (!run) return;
    this.current = null;
    run.resolve({ output: run.output, status, message: message || "" });
  }

  get running() { return this.current !== null; }

  run(code, { files = {}, onOutput } = {}) {
    if (this.current) throw new Error("a run is in progress: stop it first");
    const run = { output: "", onOutput: onOutput || (() => {}), resolve: null };
    const done = new Promise((resolve) => { run.resolve = resolve; });
    this.current = run;
    this._start().then(
      (worker) => { if (this.current === run) worker.postMessage({ type: "run", code, files }); },
      (err) => { if (this.current === run) this._finish("unavailable", String(err.message || err)); });
    return done;
  }

  stop() {
    if (this.worker) this._drop(this.worker);
    this._finish("stopped");
  }
}
