package runnerload_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/runnerload"
	"github.com/berthdev/berth/internal/testenv"
)

func TestZZScale(t *testing.T) {
	if os.Getenv("ZZ_N") == "" {
		t.Skip()
	}
	ctx := context.Background()
	bin, err := runnerload.BuildSim(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := runnerload.Full
	cfg.Sessions, _ = strconv.Atoi(os.Getenv("ZZ_N"))
	cfg.Duration, _ = time.ParseDuration(os.Getenv("ZZ_DUR"))
	cfg.SimBinary = bin
	cfg.Dir = t.TempDir()
	if os.Getenv("ZZ_PG") != "" {
		cfg.StoreURL = testenv.Postgres(t)
	} else {
		cfg.StoreURL = "sqlite://" + filepath.Join(t.TempDir(), "load.db")
	}
	res, err := runnerload.Run(ctx, cfg)
	t.Log(res)
	if err != nil {
		t.Fatal(err)
	}
}
