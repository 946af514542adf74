package runnerbin_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/berthdev/berth/runnerbin"
)

// A host that ships no runner binary of its own asks for one built from
// berth's source, for the architecture of its targets; berth.New does the
// same when Options.RunnerBinary is empty. The first call builds (a few
// seconds, reported through Progress); later ones find the cached binary.
func ExampleBinary() {
	path, err := runnerbin.Binary(context.Background(), "amd64", &runnerbin.Options{
		Progress: func(msg string) { log.Print(msg) },
	})
	switch {
	case errors.Is(err, runnerbin.ErrNoGo), errors.Is(err, runnerbin.ErrNoSource):
		// No toolchain or no source here: name a binary built elsewhere
		// (Options.Path, or berth.Options.RunnerBinary).
		log.Fatal(err)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println(path)
}
