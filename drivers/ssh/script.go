package ssh

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// How commands run on the server.
//
// The login shell receives the POSIX script as is when Acquire found it to
// be a POSIX shell (bash, dash, zsh, ...: $SHELL), else wrapped as
// `exec /bin/sh -c 'SCRIPT'`. sshd starts every
// session in a new session and process group (OpenSSH's session.c calls
// setsid for each), so the script's $$ is its process group id. The script
// first prints "berth-pgid:$$" as a line on stderr — the side channel the
// driver reads (and strips) to learn the group — then changes directory,
// exports the environment and execs the command, which keeps the pid and
// therefore the group. Cancelling a command opens another session and runs
// `kill -KILL -PGID`, which ends the whole process tree the command started
// (unless a process moved itself into another session, as daemons do).

const pgidPrefix = "berth-pgid:"

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@,+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pathExpr returns a shell expression for path p: "~" and "~/x" are under
// $HOME, relative paths under base (a shell expression), absolute ones as
// given.
func pathExpr(p, base string) string {
	switch {
	case p == "" || p == ".":
		return base
	case p == "~":
		return `"$HOME"`
	case strings.HasPrefix(p, "~/"):
		return `"$HOME"/` + shQuote(p[2:])
	case strings.HasPrefix(p, "/"):
		return shQuote(p)
	default:
		return base + "/" + shQuote(p)
	}
}

// execScript builds the remote command line for argv run in dir (already an
// absolute path or "") with env. An empty argv runs the login user's shell
// as a login shell. On a pty (pty=true) the marker goes to the terminal,
// the only output stream.
func execScript(dir string, env map[string]string, argv []string, pty bool) (string, error) {
	if len(argv) > 0 && argv[0] == "" {
		return "", errors.New("ssh: empty command")
	}
	if len(argv) == 0 && !pty {
		return "", errors.New("ssh: empty command")
	}
	var b strings.Builder
	b.WriteString(`printf '` + pgidPrefix + `%s\n' "$$"`)
	if !pty {
		b.WriteString(" >&2")
	}
	b.WriteString(" || exit 125; ")
	if dir != "" {
		b.WriteString("cd -- " + shQuote(dir) + " || exit 125; ")
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !envName.MatchString(k) {
			return "", fmt.Errorf("ssh: invalid environment variable name %q", k)
		}
		b.WriteString("export " + k + "=" + shQuote(env[k]) + "; ")
	}
	if len(argv) == 0 {
		b.WriteString(`exec "${SHELL:-/bin/sh}" -l`)
		return b.String(), nil
	}
	b.WriteString("exec")
	for _, a := range argv {
		b.WriteString(" " + shQuote(a))
	}
	return b.String(), nil
}

// wrapSh makes script the command line given to a login shell that may not
// be a POSIX shell.
func wrapSh(script string) string {
	return "exec /bin/sh -c " + shQuote(script)
}

// posixShells are login shells that run the driver's POSIX scripts as they
// are, saving the exec of /bin/sh for every command.
var posixShells = map[string]bool{"sh": true, "bash": true, "dash": true, "ash": true, "ksh": true, "mksh": true, "zsh": true}

// command returns the command line for a POSIX script on this connection:
// the script itself when the login shell is known to be POSIX, else the
// script wrapped for /bin/sh.
func (c *conn) command(script string) string {
	if c.posix.Load() {
		return script
	}
	return wrapSh(script)
}

// killScript sends sig to each process group (and, where pkill exists, to
// every process of the session the group leads, which catches jobs a
// shell with job control put in groups of their own) and, when verify is set, waits
// up to about five seconds until none of them exists any more; it prints
// "gone" or "alive PGID...".
func killScript(sig string, pgids []int, verify bool) string {
	var gs []string
	for _, g := range pgids {
		gs = append(gs, strconv.Itoa(g))
	}
	list := strings.Join(gs, " ")
	s := "for g in " + list + "; do pkill -" + sig + " -s $g 2>/dev/null; kill -" + sig + " -$g 2>/dev/null || kill -" + sig + " $g 2>/dev/null; done; "
	if !verify {
		return s + "exit 0"
	}
	s += `n=0; while :; do a=; for g in ` + list + `; do if pgrep -s $g >/dev/null 2>&1 || kill -0 -$g 2>/dev/null || kill -0 $g 2>/dev/null; then a="$a $g"; fi; done; ` +
		`if [ -z "$a" ]; then echo gone; exit 0; fi; n=$((n+1)); if [ $n -ge 50 ]; then echo "alive$a"; exit 1; fi; ` +
		`sleep 0.1 2>/dev/null || sleep 1; done`
	return s
}

// pgidSniffer passes stderr through to w, except the "berth-pgid:N" line the
// script prints first, which it parses and reports once on found. Lines a
// login shell prints before it are passed through.
type pgidSniffer struct {
	w     io.Writer
	mu    sync.Mutex
	buf   []byte
	done  bool
	pgid  int
	found chan struct{}
}

func newSniffer(w io.Writer) *pgidSniffer {
	if w == nil {
		w = io.Discard
	}
	return &pgidSniffer{w: w, found: make(chan struct{})}
}

const maxSniff = 64 << 10

func (s *pgidSniffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return s.w.Write(p)
	}
	s.buf = append(s.buf, p...)
	var out []byte
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			if len(s.buf) > maxSniff {
				out = append(out, s.buf...)
				s.buf = nil
				s.finishLocked(0)
			}
			break
		}
		line := bytes.TrimSuffix(s.buf[:i], []byte("\r"))
		if rest, ok := bytes.CutPrefix(line, []byte(pgidPrefix)); ok {
			n, _ := strconv.Atoi(string(rest))
			out = append(out, s.buf[i+1:]...)
			s.buf = nil
			s.finishLocked(n)
			break
		}
		out = append(out, s.buf[:i+1]...)
		s.buf = s.buf[i+1:]
	}
	s.mu.Unlock()
	if len(out) > 0 {
		if _, err := s.w.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (s *pgidSniffer) finishLocked(pgid int) {
	if s.done {
		return
	}
	s.done = true
	s.pgid = pgid
	close(s.found)
}

// flush passes on what is buffered (output that never held the marker) and
// stops sniffing.
func (s *pgidSniffer) flush() {
	s.mu.Lock()
	rest := s.buf
	s.buf = nil
	s.finishLocked(0)
	s.mu.Unlock()
	if len(rest) > 0 {
		_, _ = s.w.Write(rest)
	}
}

// group returns the process group once known (0 if the marker never came).
func (s *pgidSniffer) group() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pgid
}
