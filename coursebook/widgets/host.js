/* The course site's widget host: draws the widgets a chapter saved, in the reader's browser,
 * with no kernel and no network.
 *
 * Copied to _static/vendor/widgets/host.js by tools/vendor_assets.py; myst-nb adds it (the
 * nb_ipywidgets_js setting of _config.yml) only to pages whose notebook saved widget state.
 *
 * A page holds the saved state of its widgets (a script of type
 * application/vnd.jupyter.widget-state+json: every model's traits, as the kernel last sent
 * them) and one script of type application/vnd.jupyter.widget-view+json where each widget was
 * displayed.  The course's widgets are anywidgets: each model carries its own ES module (the
 * "_esm" trait) and style sheet ("_css").  For each view this host imports that module (from a
 * blob: URL, never from the network), gives it a model with anywidget's interface (get, set,
 * save_changes, on, off) over the saved traits, and calls its initialize({model}) once per model
 * and render({model, el}) once per view: the same two calls anywidget makes in JupyterLab, so
 * one module serves both.  There is no kernel: save_changes keeps the change in the page,
 * send() reports an error.
 *
 * Any other widget (an ipywidgets slider, say) would need a Python kernel to do anything: the
 * host shows a notice in its place and logs an error, which the site test reports.
 */
(function () {
  "use strict";

  var STATE_TYPE = "application/vnd.jupyter.widget-state+json";
  var VIEW_TYPE = "application/vnd.jupyter.widget-view+json";

  function isEqual(a, b) {
    if (a === b) return true;
    try {
      return JSON.stringify(a) === JSON.stringify(b);
    } catch (err) {
      return false;
    }
  }

  /* anywidget's model interface over one model's saved traits. */
  function Model(id, state) {
    this.id = id;
    this._state = Object.assign({}, state);
    this._listeners = {};
  }
  Model.prototype.get = function (name) {
    return this._state[name];
  };
  Model.prototype.set = function (name, value) {
    var changes = {};
    if (name !== null && typeof name === "object") {
      changes = name;
    } else {
      changes[name] = value;
    }
    var changed = [];
    for (var key in changes) {
      if (!Object.prototype.hasOwnProperty.call(changes, key)) continue;
      if (!isEqual(this._state[key], changes[key])) {
        this._state[key] = changes[key];
        changed.push(key);
      }
    }
    for (var i = 0; i < changed.length; i++) {
      this._emit("change:" + changed[i], [this, this._state[changed[i]]]);
    }
    if (changed.length) {
      this._emit("change", [this]);
    }
  };
  /* The page is the only copy of the state: nothing to send it to. */
  Model.prototype.save_changes = function () {};
  Model.prototype.send = function () {
    console.error("course widget " + this.id + ": send() needs a Python kernel, and the site has none; " +
                  "a widget for the site computes in its own module");
  };
  Model.prototype.on = function (event, callback, context) {
    String(event).split(/\s+/).forEach(function (name) {
      (this._listeners[name] = this._listeners[name] || []).push({ callback: callback, context: context });
    }, this);
  };
  Model.prototype.off = function (event, callback) {
    var names = event ? String(event).split(/\s+/) : Object.keys(this._listeners);
    names.forEach(function (name) {
      this._listeners[name] = (this._listeners[name] || []).filter(function (l) {
        return callback && l.callback !== callback;
      });
    }, this);
  };
  Model.prototype._emit = function (name, args) {
    (this._listeners[name] || []).slice().forEach(function (l) {
      try {
        l.callback.apply(l.context || null, args);
      } catch (err) {
        console.error("course widget " + this.id + ": a '" + name + "' listener failed:", err);
      }
    }, this);
  };

  var modules = {};   // _esm text -> Promise of the imported module
  var styles = {};    // _anywidget_id -> <style>

  function importModule(esm) {
    if (!modules[esm]) {
      var url = URL.createObjectURL(new Blob([esm], { type: "text/javascript" }));
      modules[esm] = import(url).finally(function () { URL.revokeObjectURL(url); });
    }
    return modules[esm];
  }

  function addStyle(id, css) {
    if (!css || styles[id]) return;
    var style = document.createElement("style");
    style.setAttribute("data-course-widget-style", id);
    style.textContent = css;
    document.head.appendChild(style);
    styles[id] = style;
  }

  /* The widget object of a module, as anywidget reads it: a default export that is an object
   * with initialize/render, or a function returning one. */
  function widgetOf(mod) {
    if (!mod || !mod.default) {
      return Promise.reject(new Error("the widget's module has no default export"));
    }
    return Promise.resolve(typeof mod.default === "function" ? mod.default() : mod.default);
  }

  var ready = {};     // model id -> Promise of {model, widget}, initialised once

  function prepare(id, entry) {
    if (!ready[id]) {
      var model = new Model(id, entry.state || {});
      ready[id] = importModule(model.get("_esm") || "")
        .then(widgetOf)
        .then(function (widget) {
          addStyle(model.get("_anywidget_id") || id, model.get("_css"));
          return Promise.resolve(widget.initialize ? widget.initialize({ model: model }) : undefined)
            .then(function () { return { model: model, widget: widget }; });
        });
    }
    return ready[id];
  }

  function notice(el, text) {
    el.classList.add("cw-host-notice");
    el.setAttribute("role", "note");
    el.textContent = text;
  }

  function renderView(script, states) {
    var spec;
    try {
      spec = JSON.parse(script.textContent);
    } catch (err) {
      console.error("course widget: a widget view could not be read:", err);
      return Promise.resolve();
    }
    var el = document.createElement("div");
    el.className = "cw-host";
    el.setAttribute("data-widget-model", spec.model_id);
    script.parentNode.insertBefore(el, script);
    var entry = states[spec.model_id];
    if (!entry) {
      notice(el, "This output was an interactive widget, but the page holds no saved state for it.");
      el.setAttribute("data-widget-error", "no saved state");
      console.error("course widget " + spec.model_id + ": no saved state on this page");
      return Promise.resolve();
    }
    if (entry.model_module !== "anywidget" || entry.model_name !== "AnyModel") {
      notice(el, "This output is a " + entry.model_name + " widget: it needs a running Python kernel, " +
                 "which this website does not have. Run the notebook in JupyterLab to use it.");
      el.setAttribute("data-widget-error", "needs a kernel");
      console.error("course widget " + spec.model_id + ": " + entry.model_module + " " + entry.model_name +
                    " needs a Python kernel; the site draws only widgets that compute in the browser " +
                    "(coursebook.widgets)");
      return Promise.resolve();
    }
    return prepare(spec.model_id, entry).then(function (ready) {
      return ready.widget.render ? ready.widget.render({ model: ready.model, el: el }) : undefined;
    }).then(function () {
      el.setAttribute("data-widget-ready", "");
    }).catch(function (err) {
      notice(el, "This interactive figure could not start: " + (err && err.message ? err.message : err));
      el.setAttribute("data-widget-error", String(err && err.message ? err.message : err));
      console.error("course widget " + spec.model_id + " failed:", err);
    });
  }

  function start() {
    var stateScript = document.querySelector('script[type="' + STATE_TYPE + '"]');
    var states = {};
    if (stateScript) {
      try {
        states = JSON.parse(stateScript.textContent).state || {};
      } catch (err) {
        console.error("course widget: the page's widget state could not be read:", err);
      }
    }
    var views = Array.prototype.slice.call(document.querySelectorAll('script[type="' + VIEW_TYPE + '"]'));
    Promise.all(views.map(function (script) { return renderView(script, states); })).then(function () {
      document.documentElement.setAttribute("data-widgets-ready", String(views.length));
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
