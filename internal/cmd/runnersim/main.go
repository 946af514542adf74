// Command runnersim is the simulated runners' process of the runner load
// harness (internal/runnerload, issue 55): many internal/runner runners in
// one process, each launched by a line on stdin, their tasks simulated.
// It is started by the harness only:
//
//	runnersim STATE-DIR
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/berthdev/berth/internal/runnerload"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: runnersim STATE-DIR")
		os.Exit(2)
	}
	if err := runnerload.SimMain(context.Background(), os.Stdin, os.Stdout, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "runnersim:", err)
		os.Exit(1)
	}
}
