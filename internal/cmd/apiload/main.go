// Command apiload is the API load generator of internal/apiload (issue
// 55), a process of its own so that its CPU is not the server's.
//
//	apiload < config.json          # GenConfig on stdin, the Summary as JSON on stdout
//	apiload emit TOTAL RATE        # a stream run's task: TOTAL bytes of lines at RATE bytes/s
//
// It sends requests to the URL of its configuration only (a server on
// loopback), and stops by itself: the clients after the configured
// duration, the followers of the runs' output after their end or a grace.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/berthdev/berth/internal/apiload"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "apiload:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) == 4 && os.Args[1] == "emit" {
		total, err1 := strconv.ParseInt(os.Args[2], 10, 64)
		rate, err2 := strconv.ParseInt(os.Args[3], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("emit: want TOTAL and RATE in bytes, got %q and %q", os.Args[2], os.Args[3])
		}
		return apiload.Emit(os.Stdout, total, rate)
	}
	if len(os.Args) != 1 {
		return fmt.Errorf("unexpected arguments %q: want a configuration on stdin, or emit TOTAL RATE", os.Args[1:])
	}
	var cfg apiload.GenConfig
	if err := json.NewDecoder(os.Stdin).Decode(&cfg); err != nil {
		return fmt.Errorf("the configuration on stdin: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := apiload.Generate(ctx, cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(s)
}
