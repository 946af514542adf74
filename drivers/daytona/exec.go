package daytona

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
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

// buildExec wraps argv. stdin, if not nil, is embedded base64-encoded.
func buildExec(argv []string, stdin []byte, limit int, token string) execScript {
	base := `"${TMPDIR:-/tmp}/berth-exec-` + token + `"`
	var b strings.Builder
	fmt.Fprintf(&b, "D=%s\numask 077\necho $$ >\"$D.pid\" || exit 125\n", base)
	in := "/dev/null"
	if stdin != nil {
		in = `"$D.i"`
		eof := "BERTH_STDIN_" + token
		fmt.Fprintf(&b, "base64 -d >\"$D.i\" <<'%s'\n", eof)
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
	fmt.Fprintf(&b, "( exec %s ) <%s >\"$D.o\" 2>\"$D.e\"\n", strings.Join(quoted, " "), in)
	fmt.Fprintf(&b, "c=$?\necho '%s '\"$c\"\n", frameMagic)
	fmt.Fprintf(&b, "head -c %d \"$D.o\" | base64\necho '#'\nhead -c %d \"$D.e\" | base64\n", limit+1, limit+1)
	b.WriteString("rm -f \"$D.pid\" \"$D.i\" \"$D.o\" \"$D.e\"\nexit \"$c\"\n")
	return execScript{base: base, script: b.String()}
}

// killScript ends the process group of a cancelled command and removes its
// files. It waits briefly for the pid file of a command that has only just
// started.
func killScript(base string) string {
	return "D=" + base + "\n" +
		"i=0; while [ ! -s \"$D.pid\" ] && [ $i -lt 20 ]; do sleep 0.1 2>/dev/null || sleep 1; i=$((i+1)); done\n" +
		"[ -s \"$D.pid\" ] && kill -KILL -- -\"$(cat \"$D.pid\")\" 2>/dev/null\n" +
		"rm -f \"$D.pid\" \"$D.i\" \"$D.o\" \"$D.e\"\nexit 0\n"
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
