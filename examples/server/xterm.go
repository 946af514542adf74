package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// The page's terminal uses xterm.js 3.8.1 as Debian ships it. Debian's
// libjs-xterm installs /usr/share/javascript/xterm/xterm.js as a stub that
// require()s "./public/Terminal" (it does not run in a browser), and the
// modules themselves come with node-xterm (a dependency of libjs-xterm)
// as CommonJS files under /usr/share/nodejs/xterm/lib. The server bundles
// those files once, as they are, behind a small require() of relative
// paths, and serves the bundle as /xterm/xterm.js (window.Terminal: the old
// API, new Terminal(), term.open, term.on("data"), term.write,
// term.resize) and lib/xterm.css as /xterm/xterm.css. Without them the
// page falls back to a plain line terminal.

// xtermSystemDir is node-xterm's directory (Debian bookworm).
const xtermSystemDir = "/usr/share/nodejs/xterm"

// defaultXTermDir is xtermSystemDir when xterm's modules are installed,
// else "" (the plain line terminal).
func defaultXTermDir() string {
	if _, err := os.Stat(filepath.Join(xtermSystemDir, "lib", "public", "Terminal.js")); err == nil {
		return xtermSystemDir
	}
	return ""
}

// xtermBundle is the bundle of an xterm directory, built once.
type xtermBundle struct {
	once sync.Once
	js   []byte
	err  error
}

// bundleXTerm bundles the CommonJS modules under dir/lib (not the tests,
// not the addons) into one browser script defining window.Terminal.
func bundleXTerm(dir string) ([]byte, error) {
	lib := filepath.Join(dir, "lib")
	var b bytes.Buffer
	b.WriteString("/* xterm.js from " + lib + ", bundled by the berth example server */\n(function () {\nvar defs = {}, cache = {};\n")
	n := 0
	err := filepath.WalkDir(lib, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "addons" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".js") || strings.HasSuffix(path, ".test.js") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(lib, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "defs[%q] = function (exports, module, require) {\n%s\n};\n", strings.TrimSuffix(filepath.ToSlash(rel), ".js"), src)
		n++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("xterm: bundle %s: %w", lib, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("xterm: bundle %s: no modules", lib)
	}
	b.WriteString(`function resolve(from, p) {
  var parts = from.split("/");
  parts.pop();
  p.split("/").forEach(function (s) { if (s === "..") parts.pop(); else if (s !== ".") parts.push(s); });
  var name = parts.join("/");
  if (defs[name]) return name;
  if (defs[name + "/index"]) return name + "/index";
  throw new Error("xterm bundle: no module " + p + " (from " + from + ")");
}
function load(name) {
  if (cache[name]) return cache[name].exports;
  var m = { exports: {} };
  cache[name] = m;
  defs[name].call(m.exports, m.exports, m, function (p) { return load(resolve(name, p)); });
  return m.exports;
}
window.Terminal = load("public/Terminal").Terminal;
})();
`)
	return b.Bytes(), nil
}

// serveXTerm serves the bundle as /xterm/xterm.js and the style sheet as
// /xterm/xterm.css, nothing else; 404 when the server has no xterm.
func (s *server) serveXTerm(w http.ResponseWriter, r *http.Request) {
	if s.xtermDir == "" {
		http.NotFound(w, r)
		return
	}
	var body []byte
	var ct string
	switch r.PathValue("name") {
	case "xterm.js":
		s.xterm.once.Do(func() { s.xterm.js, s.xterm.err = bundleXTerm(s.xtermDir) })
		if s.xterm.err != nil {
			s.log.Error("xterm bundle", "error", s.xterm.err.Error())
			http.Error(w, "the terminal's script is unavailable", http.StatusInternalServerError)
			return
		}
		body, ct = s.xterm.js, "text/javascript; charset=utf-8"
	case "xterm.css":
		b, err := os.ReadFile(filepath.Join(s.xtermDir, "lib", "xterm.css"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		body, ct = b, "text/css; charset=utf-8"
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(body)
}
