package lease

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The memory store's heap of releases pops, every time, the earliest
// release it holds (by time, then id), however they were pushed: out of
// order, with equal times and ids, and with pops between pushes.
func TestReleasesPopTheEarliest(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	byTime := func(a, b release) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.id, b.id)) }
	var h releases
	var held []release // what h holds, sorted
	for i := range 3000 {
		if i%3 == 2 && len(held) > 0 {
			if got := h.pop(); got != held[0] {
				t.Fatalf("pop %d: %v, want %v", i, got, held[0])
			}
			held = held[1:]
			continue
		}
		e := release{at: base.Add(time.Duration(rng.IntN(300)) * time.Second), id: fmt.Sprint("l", rng.IntN(50))}
		h.push(e)
		j, _ := slices.BinarySearchFunc(held, e, byTime)
		held = slices.Insert(held, j, e)
	}
	for len(held) > 0 {
		if got := h.pop(); got != held[0] {
			t.Fatalf("draining: %v, want %v", got, held[0])
		}
		held = held[1:]
	}
	if len(h) != 0 {
		t.Errorf("%d entries left after every one was popped", len(h))
	}
}
