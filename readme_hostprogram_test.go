package berth_test

import (
	"os"
	"strings"
	"testing"
)

// Issue 49: the README's host program is hostProgram, word for word (the
// README indents with four spaces), at most 30 lines; Example and
// TestHostProgramOnDocker run it.
func TestREADMEHostProgramIsTested(t *testing.T) {
	src, err := os.ReadFile("hostprogram_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	i := strings.Index(s, "\nfunc hostProgram(")
	j := strings.Index(s[i+1:], "\n}\n")
	if i < 0 || j < 0 {
		t.Fatal("no func hostProgram in hostprogram_test.go")
	}
	fn := s[i+1 : i+1+j+2]
	if n := strings.Count(fn, "\n") + 1; n > 30 {
		t.Errorf("hostProgram is %d lines, want at most 30", n)
	}
	if !strings.Contains(string(readme), strings.ReplaceAll(fn, "\t", "    ")) {
		t.Errorf("README.md does not show hostProgram as hostprogram_test.go has it:\n%s", fn)
	}
}
