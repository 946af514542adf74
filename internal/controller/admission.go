package controller

import (
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/berthdev/berth/internal/prpwire"
)

// Admission control (issue 55): a ceiling on the runner connections this
// controller serves at once (Options.MaxSessions) and on the output bytes
// it holds in flight across them (Options.MaxInflightBytes). Past either,
// a new connection is refused before the upgrade with HTTP 503, code
// prpwire.CodeAtCapacity and a Retry-After, and counted; the runner takes
// any refusal but 401 and 403 for a passing one and reconnects with its
// backoff. The sessions already connected go on as before: a host at its
// ceiling refuses the next runner instead of slowing every session.
const (
	// defaultMaxSessions is Options.MaxSessions' default: the 10,000 idle
	// sessions the runners-10k-idle row holds (envctl bench).
	defaultMaxSessions = 10_000
	// defaultMaxInflightBytes is Options.MaxInflightBytes' default: 64
	// runners' full windows (prpwire.DefaultMaxUnackedBytes, 16 MiB).
	defaultMaxInflightBytes = 1 << 30
	// atCapacityRetry is the Retry-After of a refusal, in seconds (a hint:
	// the runner's own backoff decides).
	atCapacityRetry = 1
)

// admission counts what the ceilings bound.
type admission struct {
	// sessions counts the connections admitted and not yet ended (from
	// the admission check to the end of the connection's handler).
	sessions atomic.Int64
	// inflight counts the output bytes read from runners and not yet
	// acked (stored and synced), over every connection.
	inflight atomic.Int64
	// refusedSessions and refusedBytes count the connections refused past
	// each ceiling.
	refusedSessions, refusedBytes atomic.Int64
}

// AdmissionStats is what the admission control of one Controller counts
// (Controller.Admission).
type AdmissionStats struct {
	// Sessions is the number of runner connections admitted and not yet
	// ended; MaxSessions the ceiling (negative: none).
	Sessions, MaxSessions int64
	// InflightBytes is the output read from runners and not yet acked,
	// over every connection; MaxInflightBytes the ceiling (negative: none).
	InflightBytes, MaxInflightBytes int64
	// RefusedSessions and RefusedBytes count the connections refused since
	// New because of each ceiling (HTTP 503, prpwire.CodeAtCapacity).
	RefusedSessions, RefusedBytes int64
}

// Admission returns the counts of the controller's admission control
// (a pure read of this process's counters, like ConnectedSessions).
func (c *Controller) Admission() AdmissionStats {
	return AdmissionStats{Sessions: c.adm.sessions.Load(), MaxSessions: int64(c.o.MaxSessions),
		InflightBytes: c.adm.inflight.Load(), MaxInflightBytes: c.o.MaxInflightBytes,
		RefusedSessions: c.adm.refusedSessions.Load(), RefusedBytes: c.adm.refusedBytes.Load()}
}

// admitConn admits one runner connection, or refuses it (503, at_capacity,
// counted) and returns false. An admitted connection calls the returned
// release when its handler ends.
func (c *Controller) admitConn(w http.ResponseWriter, session string) (release func(), ok bool) {
	if maxB := c.o.MaxInflightBytes; maxB >= 0 && c.adm.inflight.Load() >= maxB {
		c.adm.refusedBytes.Add(1)
		c.refuseAtCapacity(w, session, "the host holds its ceiling of output bytes in flight")
		return nil, false
	}
	n := c.adm.sessions.Add(1)
	if maxS := int64(c.o.MaxSessions); maxS >= 0 && n > maxS {
		c.adm.sessions.Add(-1)
		c.adm.refusedSessions.Add(1)
		c.refuseAtCapacity(w, session, "the host serves its ceiling of "+strconv.FormatInt(maxS, 10)+" runner connections")
		return nil, false
	}
	return func() { c.adm.sessions.Add(-1) }, true
}

func (c *Controller) refuseAtCapacity(w http.ResponseWriter, session, why string) {
	c.log.Info("controller: connect: at capacity; the runner retries", "session", session, "why", why)
	w.Header().Set("Retry-After", strconv.Itoa(atCapacityRetry))
	writeJSON(w, http.StatusServiceUnavailable, prpwire.ErrorResponse{Code: prpwire.CodeAtCapacity,
		Message: why + ": connection of session " + session + " refused for now; retry later"})
}
