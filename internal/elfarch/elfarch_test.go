package elfarch_test

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/elfarch"
)

// The test binary itself is an ELF file of this machine's architecture;
// a text file is none.
func TestOf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the test binary is ELF on Linux only")
	}
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := elfarch.Of(f); got != runtime.GOARCH {
		t.Errorf("Of(test binary) = %q, want %q", got, runtime.GOARCH)
	}
	if got := elfarch.Of(strings.NewReader("#!/bin/sh\necho hi\n")); got != "" {
		t.Errorf("Of(a script) = %q, want \"\"", got)
	}
}
