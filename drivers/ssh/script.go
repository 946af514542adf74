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
// `exec /bin/sh -c 'SCRIPT'`. The driver does not rely on the server
// starting each session in a new process group (OpenSSH's sshd does,
// Dropbear does not): the wrapper reads its own process group (field 5 of
// /proc/$$/stat, else ps -o pgid=) and, when it is not the group's leader,
// re-executes the script under setsid(1), which keeps the pid and makes it
// the leader of a new session and group. The script then prints
// "berth-pgid:$$" as a line on stderr — the side channel the driver reads
// (and strips) to learn the group — or "berth-pgid:0" when it could not
// make the group (no setsid), exports the lease's tag (leaseTagEnv, the
// lease nonce and the command's number), changes directory, exports the
// environment and execs the command, which keeps the pid and therefore
// the group. Cancelling a command opens another session and runs
// `kill -KILL -PGID` and kills every process carrying the command's tag,
// which ends the whole process tree the command started, also processes
// that moved into another session (unless they dropped the tag from their
// environment).

// leaseTagEnv is the environment variable every command of a lease carries
// (inherited by its children): "<lease nonce>-<command number>". Release
// ends every process of the login user whose environment holds the lease's
// tag and confirms only when none is left.
const leaseTagEnv = "BERTH_SSH_LEASE"

// pgidDetect sets g to the process group of the shell ($$), empty when
// neither /proc nor ps tells. Parameter expansion only (no word
// splitting), so it holds in zsh too.
const pgidDetect = `g=; if [ -r /proc/$$/stat ]; then read -r g < /proc/$$/stat; g=${g##*) }; g=${g#* }; g=${g#* }; g=${g%% *}; ` +
	`else g=$(ps -o pgid= -p $$ 2>/dev/null); g=${g##* }; fi; `

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
// absolute path or "") with env, tagged with tag (leaseTagEnv). An empty
// argv runs the login user's shell as a login shell. On a pty (pty=true)
// the marker goes to the terminal, the only output stream.
//
// claim, if not empty, is a path the script claims with mkdir before
// anything else: when it cannot make it because it exists (the driver
// claimed it first, see conn.stealClaim), the script exits 0 and runs
// nothing; when it cannot make it at all, it runs as without a claim.
func execScript(dir string, env map[string]string, argv []string, pty bool, tag, claim string) (string, error) {
	if len(argv) > 0 && argv[0] == "" {
		return "", errors.New("ssh: empty command")
	}
	if len(argv) == 0 && !pty {
		return "", errors.New("ssh: empty command")
	}
	var b strings.Builder
	if claim != "" {
		b.WriteString("if ! mkdir " + shQuote(claim) + " 2>/dev/null && [ -d " + shQuote(claim) + " ]; then exit 0; fi; ")
	}
	b.WriteString(pgidDetect + `if [ "$g" = "$$" ]; then g=$$; else g=0; fi; printf '` + pgidPrefix + `%s\n' "$g"`)
	if !pty {
		b.WriteString(" >&2")
	}
	b.WriteString(" || exit 125; ")
	if tag != "" {
		b.WriteString("export " + leaseTagEnv + "=" + shQuote(tag) + "; ")
	}
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
	} else {
		b.WriteString("exec")
		for _, a := range argv {
			b.WriteString(" " + shQuote(a))
		}
	}
	return groupWrap(b.String()), nil
}

// claimDir is where the start claims of a Dropbear lease live: one
// directory per command start, named claimPrefix + the command's tag and
// the attempt, removed at release.
const claimDir = "/tmp"

// claimPrefix begins the name of every start claim.
const claimPrefix = ".berth-claim-"

// claimPath is the start claim of attempt of the command tagged tag.
func claimPath(tag string, attempt int) string {
	return claimDir + "/" + claimPrefix + tag + "-" + strconv.Itoa(attempt)
}

// groupWrap runs script as the leader of its own process group: as it is
// when the shell already leads its group (OpenSSH), else re-executed under
// setsid (same pid, new session and group), else as it is (the script
// then reports group 0).
func groupWrap(script string) string {
	return "s=" + shQuote(script) + "; " + pgidDetect +
		`if [ "$g" != "$$" ] && command -v setsid >/dev/null 2>&1; then exec setsid /bin/sh -c "$s"; fi; eval "$s"`
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

// tagScan defines tagged, which prints the pids of the login user's
// processes whose environment holds an entry matching the grep -z pattern
// $t (set by the caller; GNU's and busybox's grep), and exits 3 with
// "noproc" where /proc cannot be read (then nothing can confirm that the
// tags are gone).
const tagScan = `tagged() { for f in $(grep -lsz -- "$t" /proc/[0-9]*/environ 2>/dev/null); do q=${f#/proc/}; printf '%s ' "${q%/environ}"; done; }; ` +
	`[ -r /proc/self/environ ] || { echo noproc; exit 3; }; `

// tagPattern returns the grep pattern matching tag (a leaseTag) exactly, or, with
// prefix, every tag that starts with it.
func tagPattern(tag string, prefix bool) string {
	p := "^" + leaseTagEnv + "=" + tag // hex digits and "-": no metacharacters
	if !prefix {
		p += "$"
	}
	return p
}

// killScript sends sig to each process group (and, where pkill exists, to
// every process of the session the group leads, which catches jobs a
// shell with job control put in groups of their own) and, when tagPat is
// set, to every process whose environment matches it (tagScan). When
// verify is set it waits up to about five seconds until none of them
// exists any more; it prints "gone" or "alive PGID... tagged PID...", and
// "noproc" (exit 3) when the tags cannot be read.
func killScript(sig string, pgids []int, tagPat string, verify bool) string {
	var gs []string
	for _, g := range pgids {
		gs = append(gs, strconv.Itoa(g))
	}
	list := strings.Join(gs, " ")
	s := ""
	if list != "" {
		s = "for g in " + list + "; do pkill -" + sig + " -s $g 2>/dev/null; kill -" + sig + " -$g 2>/dev/null || kill -" + sig + " $g 2>/dev/null; done; "
	}
	if tagPat != "" {
		s = "t=" + shQuote(tagPat) + "; " + tagScan + s + `p=$(tagged); [ -n "$p" ] && kill -` + sig + ` $p 2>/dev/null; `
	}
	if !verify {
		return s + "exit 0"
	}
	s += `n=0; while :; do a=; for g in ` + list + `; do if pgrep -s $g >/dev/null 2>&1 || kill -0 -$g 2>/dev/null || kill -0 $g 2>/dev/null; then a="$a $g"; fi; done; `
	if tagPat != "" {
		s += `p=$(tagged); [ -n "$p" ] && { a="$a tagged $p"; kill -` + sig + ` $p 2>/dev/null; }; `
	}
	s += `if [ -z "$a" ]; then echo gone; exit 0; fi; n=$((n+1)); if [ $n -ge 50 ]; then echo "alive$a"; exit 1; fi; ` +
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
