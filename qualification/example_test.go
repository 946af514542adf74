package qualification_test

import (
	"fmt"

	"github.com/berthdev/berth/qualification"
)

// A platform's text form parses to a normalized value, and CanRun says
// whether a runner artifact built for some platforms runs on it.
func ExampleCanRun() {
	p, err := qualification.ParsePlatform("Linux/x86_64 libc=glibc:2.31 release=debian:11")
	if err != nil {
		panic(err)
	}
	fmt.Println(p)

	builds := []qualification.Platform{
		{OS: "linux", Arch: "amd64", Libc: qualification.LibcGlibc, LibcVersion: "2.36"},
		{OS: "linux", Arch: "arm64", Libc: qualification.LibcNone},
	}
	v := qualification.CanRun(p, builds)
	fmt.Println(v.OK, v.Code)
	// Output:
	// linux/amd64 libc=glibc:2.31 release=debian:11
	// false libc_too_old
}
