package environmenttest

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/google/go-cmp/cmp"
)

// ConfigAsJSON returns a cmp option that compares config.Config values by
// their JSON form. Stores that persist configs as JSON return them decoded
// (json.Number, []any, map[string]any for a SecretRef); the config.Config
// accessors read both forms, and the JSON form is what a store promises to
// keep.
func ConfigAsJSON() cmp.Option { return configAsJSON }

var configAsJSON = cmp.FilterPath(func(p cmp.Path) bool {
	// Only values declared as config.Config: the decoded map[string]any
	// is assignable to config.Config and must not be transformed again.
	return p.Last().Type() == reflect.TypeFor[config.Config]()
}, cmp.Transformer("ConfigAsJSON", func(c config.Config) any {
	if c == nil {
		return nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "unmarshalable config: " + err.Error()
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "undecodable config: " + err.Error()
	}
	return v
}))

// warm makes n concurrent reads so that a store with a connection pool has
// its connections open before a race: otherwise connecting staggers the
// racers and hides races.
func warm(t *testing.T, s environment.Store, n int) {
	t.Helper()
	for i, err := range race(n, func(int) error {
		_, err := s.ListEnvironments(context.Background(), environment.ListFilter{})
		return err
	}) {
		if err != nil {
			t.Fatalf("warm-up read %d: %v", i, err)
		}
	}
}

// race runs fn(i) for i in [0, n) in n goroutines released together, and
// returns their errors by index.
func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fn(i)
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// diff fails the test with a -want +got diff unless want and got are equal.
func diff(t *testing.T, what string, want, got any, opts ...cmp.Option) {
	t.Helper()
	if d := cmp.Diff(want, got, opts...); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}
