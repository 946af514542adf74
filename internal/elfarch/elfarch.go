// Package elfarch reads the Go architecture (GOARCH) an ELF executable
// was built for, from its header: the runner binary's architecture, which
// runnerbin checks against the one a host asks for and the controller
// records in a RunnerSpec.
package elfarch

import (
	"debug/elf"
	"io"
)

// Of returns the GOARCH of the ELF file f ("amd64", "arm64", ...), or ""
// when f is not an ELF file or its machine is not one Go builds for.
func Of(f io.ReaderAt) string {
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	defer ef.Close()
	switch ef.Machine {
	case elf.EM_X86_64:
		return "amd64"
	case elf.EM_AARCH64:
		return "arm64"
	case elf.EM_386:
		return "386"
	case elf.EM_ARM:
		return "arm"
	case elf.EM_RISCV:
		if ef.Class == elf.ELFCLASS64 {
			return "riscv64"
		}
	case elf.EM_PPC64:
		if ef.Data == elf.ELFDATA2LSB {
			return "ppc64le"
		}
		return "ppc64"
	case elf.EM_S390:
		return "s390x"
	}
	return ""
}
