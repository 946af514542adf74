package testenv

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// FakeRunnerBinary writes, in a temporary directory of t, a file that
// stands for a runner binary where none is executed (the fake driver runs
// internal/runner in-process): an ELF header of linux/runtime.GOARCH and
// nothing else, so that its architecture reads as this host's
// (runnerbin.Spec). It returns the path.
func FakeRunnerBinary(t testing.TB) string {
	t.Helper()
	machine := map[string]uint16{"amd64": 62, "arm64": 183, "386": 3, "arm": 40, "riscv64": 243, "ppc64le": 21, "s390x": 22}[runtime.GOARCH]
	if machine == 0 {
		t.Skipf("no ELF machine for %s", runtime.GOARCH)
	}
	h := make([]byte, 64)
	copy(h, "\x7fELF")
	h[4], h[5], h[6] = 2, 1, 1 // 64-bit, little-endian, version 1
	if runtime.GOARCH == "386" || runtime.GOARCH == "arm" {
		h[4] = 1
	}
	if runtime.GOARCH == "s390x" {
		h[5] = 2
	}
	bo := binary.ByteOrder(binary.LittleEndian)
	if h[5] == 2 {
		bo = binary.BigEndian
	}
	bo.PutUint16(h[16:], 2) // ET_EXEC
	bo.PutUint16(h[18:], machine)
	bo.PutUint32(h[20:], 1)
	p := filepath.Join(t.TempDir(), "berth-runner")
	if err := os.WriteFile(p, h, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
