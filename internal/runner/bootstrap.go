package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// credentials are what the runner got from its exchange. They live in the
// runner's memory only, never in its state directory, whose files its
// tasks (the same user) can read and write: a restarted runner rejoins its
// session with a resume ticket instead.
type credentials struct {
	Token     string
	ExpiresAt time.Time
	Session   string
	Scope     prp.Scope
	Lease     string
	Run       string
	// StateKey authenticates the journal's and the outbox's records.
	StateKey []byte
	// Resume: the ticket was a resume ticket.
	Resume bool
}

// legacyCredFile is where older runners saved their token; New removes it.
const legacyCredFile = "credentials.json"

// ErrRefused is returned (wrapped, with the controller's stable code) when
// the controller refuses the ticket or the token: the runner cannot
// continue without a new ticket.
var ErrRefused = errcode.New(errcode.AuthFailed, "runner: refused by the controller")

// permanent marks an error after which reconnecting cannot help.
type permanent struct{ err error }

// Error returns the wrapped error's message.
func (p permanent) Error() string { return p.err.Error() }

// Unwrap returns the wrapped error.
func (p permanent) Unwrap() error { return p.err }

// exchange trades the ticket for a token over HTTP, before any upgrade
// (PRP-2). A 401 is permanent (ErrRefused with the controller's code).
func exchange(ctx context.Context, client *http.Client, base, lease, ticket string) (credentials, error) {
	url := base + prpwire.ExchangePath
	body, _ := json.Marshal(prpwire.ExchangeRequest{Ticket: ticket, Lease: lease})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return credentials{}, permanent{fmt.Errorf("runner: exchange at %s: %w", url, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return credentials{}, fmt.Errorf("runner: exchange at %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, prpwire.MaxExchangeBody))
	if err != nil {
		return credentials{}, fmt.Errorf("runner: exchange at %s: read: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("runner: exchange at %s: HTTP %d: %s", url, resp.StatusCode, refusal(b))
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusBadRequest {
			return credentials{}, permanent{fmt.Errorf("%w: %w", ErrRefused, err)}
		}
		return credentials{}, err
	}
	var xr prpwire.ExchangeResponse
	if err := json.Unmarshal(b, &xr); err != nil || xr.Token == "" || !prpwire.ValidID(xr.Session) || !xr.Scope.Valid() {
		return credentials{}, permanent{fmt.Errorf("runner: exchange at %s: the response is not an exchange response", url)}
	}
	return credentials{Token: xr.Token, ExpiresAt: xr.ExpiresAt, Session: xr.Session, Scope: xr.Scope, Lease: xr.Lease, Run: xr.Run,
		StateKey: xr.StateKey, Resume: xr.Resume}, nil
}

// refusal renders an ErrorResponse body (code and message), bounded.
func refusal(b []byte) string {
	var er prpwire.ErrorResponse
	if json.Unmarshal(b, &er) == nil && er.Code != "" {
		msg := er.Message
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return string(er.Code) + ": " + msg
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
