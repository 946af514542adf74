package daytona

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/berthdev/berth/drivers"
)

// The toolbox's process/execute returns stdout and stderr combined in one
// string. To keep Exec's contract (separate streams, an output limit per
// stream, stdin), the driver runs every command inside a small POSIX sh
// wrapper that sends the command's stdout and stderr to private files
// (umask 077) in the sandbox's TMPDIR (default /tmp), and then prints one
// framed answer:
//
//	BERTH-EXEC-1 <exit>
//	<stdout, at most limit+1 bytes, base64>
//	#
//	<stderr, at most limit+1 bytes, base64>
//
// Base64 keeps binary output intact through the JSON string; the extra
// byte tells a truncated stream. The wrapper also writes its process id
// (the toolbox starts each command's shell as a process-group leader) so
// that a cancelled Exec can kill the group with a second request. It needs
// sh, head, base64 and rm in the sandbox image (coreutils or busybox), and
// forks as few processes as it can.

const frameMagic = "BERTH-EXEC-1"

// execScript is one wrapped command.
type execScript struct {
	base   string // the sandbox-side path prefix of the command's files
	script string
}

// newToken returns a random token naming one command's files.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// maxStdin caps Command.Stdin: it travels inside the command string.
const maxStdin = 8 << 20

// buildExec wraps argv. stdin, if not nil, is embedded base64-encoded; env,
// if not empty, is exported inline in the command's subshell (for daemons
// that ignore the request's envs; names must pass checkEnvNames). The
// script runs under any POSIX shell and under zsh, which the daemon prefers
// when /etc/shells lists it: every expansion is quoted, so zsh's different
// word splitting does not matter.
func buildExec(argv []string, stdin []byte, limit int, token string, env map[string]string) execScript {
	base := `"${TMPDIR:-/tmp}/berth-exec-` + token + `"`
	var b strings.Builder
	// R, the files of this run, carries the shell's pid: a request the
	// proxy replays runs the same script twice, perhaps at once, and each
	// run keeps its own files (at-least-once, see Sandbox.Exec).
	fmt.Fprintf(&b, "D=%s\nR=\"$D-$$\"\numask 077\necho $$ >>\"$D.pid\" || exit 125\n", base)
	in := "/dev/null"
	if stdin != nil {
		in = `"$R.i"`
		eof := "BERTH_STDIN_" + token
		fmt.Fprintf(&b, "base64 -d >\"$R.i\" <<'%s'\n", eof)
		enc := base64.StdEncoding.EncodeToString(stdin)
		for len(enc) > 76 {
			b.WriteString(enc[:76])
			b.WriteByte('\n')
			enc = enc[76:]
		}
		if enc != "" {
			b.WriteString(enc)
			b.WriteByte('\n')
		}
		b.WriteString(eof + "\n")
	}
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = shellQuote(a)
	}
	exports := ""
	for _, k := range slices.Sorted(maps.Keys(env)) {
		exports += "export " + k + "=" + shellQuote(env[k]) + "; "
	}
	fmt.Fprintf(&b, "( %sexec %s ) <%s >\"$R.o\" 2>\"$R.e\"\n", exports, strings.Join(quoted, " "), in)
	fmt.Fprintf(&b, "c=$?\necho '%s '\"$c\"\n", frameMagic)
	fmt.Fprintf(&b, "head -c %d \"$R.o\" | base64\necho '#'\nhead -c %d \"$R.e\" | base64\n", limit+1, limit+1)
	b.WriteString("rm -f \"$D.pid\" \"$R.i\" \"$R.o\" \"$R.e\"\nexit \"$c\"\n")
	return execScript{base: base, script: b.String()}
}

// killScript ends the process group of every run of a cancelled command
// (a replayed request runs twice) and removes their files. It waits briefly
// for the pid file of a command that has only just started. Running it
// twice does no harm.
func killScript(base string) string {
	return "D=" + base + "\n" +
		"i=0; while [ ! -s \"$D.pid\" ] && [ $i -lt 20 ]; do sleep 0.1 2>/dev/null || sleep 1; i=$((i+1)); done\n" +
		"if [ -s \"$D.pid\" ]; then for p in $(cat \"$D.pid\"); do kill -KILL -- -\"$p\" 2>/dev/null; rm -f \"$D-$p.i\" \"$D-$p.o\" \"$D-$p.e\"; done; fi\n" +
		"rm -f \"$D.pid\"\nexit 0\n"
}

// frame is a parsed wrapper answer.
type frame struct {
	exit           int
	stdout, stderr []byte // at most limit+1 bytes each
	noise          string // text before the frame (the wrapper's own errors)
}

var errNoFrame = errors.New("no framed answer")

// parseFrame reads the wrapper's answer out of the toolbox result.
func parseFrame(result string) (*frame, error) {
	i := strings.LastIndex(result, frameMagic+" ")
	if i < 0 || (i > 0 && result[i-1] != '\n') {
		return nil, errNoFrame
	}
	f := &frame{noise: result[:i]}
	rest := result[i:]
	nl := strings.IndexByte(rest, '\n')
	if nl < 0 {
		return nil, errNoFrame
	}
	fields := strings.Fields(rest[:nl])
	if len(fields) != 2 {
		return nil, fmt.Errorf("%w: header %q", errNoFrame, rest[:nl])
	}
	var err error
	if f.exit, err = strconv.Atoi(fields[1]); err != nil {
		return nil, fmt.Errorf("%w: exit %q", errNoFrame, fields[1])
	}
	body := rest[nl+1:]
	sep := strings.Index(body, "\n#\n")
	switch {
	case sep >= 0:
	case strings.HasPrefix(body, "#\n"):
		sep = -1
	default:
		return nil, fmt.Errorf("%w: no separator", errNoFrame)
	}
	var outPart, errPart string
	if sep < 0 {
		outPart, errPart = "", body[2:]
	} else {
		outPart, errPart = body[:sep], body[sep+3:]
	}
	if f.stdout, err = decodeB64(outPart); err != nil {
		return nil, fmt.Errorf("%w: stdout: %v", errNoFrame, err)
	}
	if f.stderr, err = decodeB64(errPart); err != nil {
		return nil, fmt.Errorf("%w: stderr: %v", errNoFrame, err)
	}
	return f, nil
}

func decodeB64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' {
			return -1
		}
		return r
	}, s)
	return base64.StdEncoding.DecodeString(s)
}

// readStdin reads r up to maxStdin bytes.
func readStdin(r io.Reader) ([]byte, error) {
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, maxStdin+1))
	if err != nil {
		return nil, err
	}
	if n > maxStdin {
		return nil, fmt.Errorf("stdin is larger than %d bytes", maxStdin)
	}
	return buf.Bytes(), nil
}

// envNameRE is what a variable name exported inline must look like (the
// daemon's own check of envs, apps/daemon/pkg/common ValidateEnvKeys, has
// the same shape).
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkEnvNames refuses a variable name that cannot be exported inline.
func checkEnvNames(env map[string]string) error {
	for k := range env {
		if !envNameRE.MatchString(k) {
			return fmt.Errorf("environment variable name %q is not a shell identifier", k)
		}
	}
	return nil
}

// Daemon versions whose toolbox changed how process/execute runs a command
// (apps/daemon/pkg/toolbox/process/execute.go): before v0.155.0 an omitted
// timeout meant 360 s; before v0.156.0 the command string was split on
// spaces (quotes grouping, no escapes) and run directly, with no shell;
// from v0.156.0 it is fed to the shell the daemon picks (zsh, then bash,
// then sh, from /etc/shells); envs exists only from v0.167.0 and is
// ignored before.
var (
	daemonDefaultTimeoutGone = daemonVersion{0, 155, 0}
	daemonShellExec          = daemonVersion{0, 156, 0}
	daemonEnvs               = daemonVersion{0, 167, 0}
)

// daemonVersion is a parsed sandbox daemonVersion.
type daemonVersion [3]int

// parseDaemonVersion reads "0.156.0" or "v0.156.0" (a suffix such as
// "-rc1" is ignored); ok is false for anything else, "" included.
func parseDaemonVersion(s string) (v daemonVersion, ok bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexAny(s, "-+ "); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func (v daemonVersion) less(w daemonVersion) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

func (v daemonVersion) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// execShape is how a request must be shaped for a sandbox's daemon.
type execShape struct {
	version     string // as the API reported it, "" when it did not
	envsField   bool   // the daemon reads the request's envs
	shell       bool   // the daemon runs the command through a shell
	needTimeout bool   // an omitted timeout would mean 360 s
}

// shapeFor returns the request shape for a daemon version. A version the
// API did not report, or one that does not parse, is taken as a shell
// daemon that may predate envs: env vars then travel inline, which every
// shell daemon honours, so none is ever silently dropped.
func shapeFor(version string) execShape {
	v, ok := parseDaemonVersion(version)
	if !ok {
		return execShape{version: version, shell: true}
	}
	return execShape{
		version:     version,
		envsField:   !v.less(daemonEnvs),
		shell:       !v.less(daemonShellExec),
		needTimeout: v.less(daemonDefaultTimeoutGone),
	}
}

// maxOldShapeScript bounds a script sent to a daemon that runs the command
// string directly: it travels as one argument of sh -c, and Linux caps one
// argument at 128 KiB.
const maxOldShapeScript = 96 << 10

// forShape turns a wrapper script into the command string a daemon of
// shape sh runs as a POSIX sh script. A shell daemon takes the script
// itself. An older daemon splits the string on spaces and runs it with no
// shell; the script then travels base64-encoded (no quote or space inside)
// as sh -c "echo <base64> | base64 -d | sh", which that split keeps as
// three arguments. A script too long for one argument is refused, naming
// the daemon version.
func forShape(script string, sh execShape) (string, error) {
	if sh.shell {
		return script, nil
	}
	enc := base64.StdEncoding.EncodeToString([]byte(script))
	if len(enc) > maxOldShapeScript {
		return "", fmt.Errorf("the sandbox's daemon %s (before %s) runs commands without a shell, and this command (with its stdin) is %d bytes, more than the %d its argument can carry: %w",
			sh.version, daemonShellExec, len(enc), maxOldShapeScript, drivers.ErrUnsupported)
	}
	return `sh -c "echo ` + enc + ` | base64 -d | sh"`, nil
}
