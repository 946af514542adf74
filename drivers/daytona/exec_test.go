package daytona

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The wrapper keeps stdout and stderr apart, binary-safe, capped, with
// stdin and inline env, when run as the toolbox runs it (script on stdin,
// both streams combined) by each shell the daemon may pick: dash (Debian's
// sh), bash and zsh.
func TestExecWrapperRoundTrip(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"dash", "bash", "zsh"} {
		path, err := exec.LookPath(shell)
		if err != nil {
			if os.Getenv("BERTH_REQUIRE_REAL") != "" {
				t.Fatalf("%s is not installed: %v", shell, err)
			}
			t.Logf("%s is not installed", shell)
			continue
		}
		t.Run(shell, func(t *testing.T) {
			t.Parallel()
			testWrapperUnder(t, path)
		})
	}
}

func testWrapperUnder(t *testing.T, shell string) {
	tests := []struct {
		name      string
		argv      []string
		stdin     []byte
		limit     int
		wantOut   string
		wantErr   string
		wantExit  int
		wantTrunc bool
	}{
		{"streams apart", []string{"sh", "-c", "echo out; echo err >&2"}, nil, 100, "out\n", "err\n", 0, false},
		{"empty output", []string{"true"}, nil, 100, "", "", 0, false},
		{"exit status", []string{"sh", "-c", "exit 7"}, nil, 100, "", "", 7, false},
		{"binary output", []string{"printf", `\000\377\n`}, nil, 100, "\x00\xff\n", "", 0, false},
		{"quoting", []string{"echo", "it's", "$HOME", "a  b"}, nil, 100, "it's $HOME a  b\n", "", 0, false},
		{"stdin", []string{"cat"}, []byte("one\ntwo"), 100, "one\ntwo", "", 0, false},
		{"empty stdin", []string{"cat"}, []byte{}, 100, "", "", 0, false},
		{"limit", []string{"echo", "hello world"}, nil, 4, "hello", "", 0, true},
		{"unknown command", []string{"berth-no-such-command"}, nil, 100, "", "", 127, false},
		{"inline env", []string{"sh", "-c", `printf %s "$V"`}, nil, 100, `a 'b' "$c"`, "", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var env map[string]string
			if tc.name == "inline env" {
				env = map[string]string{"V": `a 'b' "$c"`}
			}
			ws := buildExec(tc.argv, tc.stdin, tc.limit, newToken(), env)
			cmd := exec.Command(shell)
			cmd.Stdin = strings.NewReader(ws.script)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + t.TempDir(), "HOME=/nonexistent"}
			var combined bytes.Buffer
			cmd.Stdout, cmd.Stderr = &combined, &combined
			_ = cmd.Run()
			f, err := parseFrame(combined.String())
			if err != nil {
				t.Fatalf("parseFrame(%q): %v", combined.String(), err)
			}
			if f.exit != tc.wantExit {
				t.Errorf("exit %d, want %d", f.exit, tc.wantExit)
			}
			// The frame holds limit+1 bytes so that truncation shows.
			if got := string(f.stdout); got != tc.wantOut {
				t.Errorf("stdout %q, want %q", got, tc.wantOut)
			}
			if tc.name != "unknown command" {
				if diff := cmp.Diff(tc.wantErr, string(f.stderr)); diff != "" {
					t.Errorf("stderr (-want +got):\n%s", diff)
				}
			} else if len(f.stderr) == 0 {
				t.Errorf("an unknown command left no message on stderr")
			}
			if trunc := len(f.stdout) > tc.limit; trunc != tc.wantTrunc {
				t.Errorf("truncated %v, want %v", trunc, tc.wantTrunc)
			}
		})
	}
}

func TestParseFrameRejectsGarbage(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"", "exec: no such file or directory", "BERTH-EXEC-1\n", "BERTH-EXEC-1 x\n#\n",
		"BERTH-EXEC-1 0\nnot base64!\n#\n", "xBERTH-EXEC-1 0\n#\n",
	} {
		if f, err := parseFrame(in); err == nil {
			t.Errorf("parseFrame(%q) = %+v, want an error", in, f)
		}
	}
	f, err := parseFrame("mkdir: warning\nBERTH-EXEC-1 3\nb3V0Cg==\n#\n")
	if err != nil || f.exit != 3 || string(f.stdout) != "out\n" || f.noise != "mkdir: warning\n" {
		t.Errorf("parseFrame with noise = %+v, %v", f, err)
	}
}

// parseFrame never panics, and reads back any stdout/stderr pair framed the
// way the wrapper frames it, whatever noise comes before.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte("out\n"), []byte("err\n"), "", 0)
	f.Add([]byte{}, []byte{0, 255}, "sh: warning\n", 127)
	f.Fuzz(func(t *testing.T, stdout, stderr []byte, noise string, exit int) {
		_, _ = parseFrame(noise) // arbitrary input: no panic
		if strings.Contains(noise, frameMagic) || (noise != "" && !strings.HasSuffix(noise, "\n")) {
			return
		}
		b64 := func(p []byte) string {
			if len(p) == 0 {
				return ""
			}
			return base64.StdEncoding.EncodeToString(p) + "\n"
		}
		in := fmt.Sprintf("%s%s %d\n%s#\n%s", noise, frameMagic, exit, b64(stdout), b64(stderr))
		fr, err := parseFrame(in)
		if err != nil {
			t.Fatalf("parseFrame(%q): %v", in, err)
		}
		if fr.exit != exit || !bytes.Equal(fr.stdout, stdout) || !bytes.Equal(fr.stderr, stderr) || fr.noise != noise {
			t.Fatalf("parseFrame(%q) = %+v", in, fr)
		}
	})
}
