package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/authz"
)

// tokenEntry is one entry of the -tokens file.
type tokenEntry struct {
	Token     string   `json:"token"`
	Role      string   `json:"role"`
	ID        string   `json:"id"`
	Companies []string `json:"companies"`
}

// minTokenLen is the shortest bearer token the -tokens file may hold.
const minTokenLen = 16

// tokenSet maps the SHA-256 of a bearer token to its principal; the
// tokens themselves are not kept.
type tokenSet map[string]authz.Principal

// hashToken returns the hex SHA-256 of a token (bearer, session, link).
func hashToken(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// knownRole reports whether r is one of authz's roles.
func knownRole(r authz.Role) bool {
	switch r {
	case authz.RoleInstanceAdmin, authz.RoleLocalOperator, authz.RoleBoardMember, authz.RoleAgent:
		return true
	}
	return false
}

// loadTokens reads the -tokens file: {"tokens": [{"token", "role", "id",
// "companies"}]}. A malformed file is refused with its line and the field
// (never the token's value).
func loadTokens(path string) (tokenSet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-tokens: %w", err)
	}
	return parseTokens(path, data)
}

// shownField returns an unknown field's name as an error may show it:
// a name as long as a token could be one, and is not shown.
func shownField(f string) string {
	if len(f) >= minTokenLen {
		return "(an unknown field, not shown: it may be a token)"
	}
	return f
}

// lineAt returns the 1-based line of byte offset off in data, skipping
// the white space that follows it.
func lineAt(data []byte, off int64) int {
	for off < int64(len(data)) && strings.ContainsRune(" \t\r\n,", rune(data[off])) {
		off++
	}
	return 1 + bytes.Count(data[:min(off, int64(len(data)))], []byte("\n"))
}

// parseTokens parses a -tokens file's contents; name labels the errors.
func parseTokens(name string, data []byte) (tokenSet, error) {
	fail := func(off int64, field, format string, a ...any) error {
		where := fmt.Sprintf("%s:%d", name, lineAt(data, off))
		if field != "" {
			where += ": field " + field
		}
		return fmt.Errorf("-tokens %s: %s", where, fmt.Sprintf(format, a...))
	}
	jsonErr := func(dec *json.Decoder, err error) error {
		off := dec.InputOffset()
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = se.Offset
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fail(te.Offset, te.Field, "want a %s", te.Type)
		}
		msg := err.Error()
		if i := strings.Index(msg, "unknown field "); i >= 0 {
			return fail(off, shownField(strings.Trim(msg[i+len("unknown field "):], `"`)), "unknown field")
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fail(int64(len(data)), "", "unexpected end of the file")
		}
		return fail(off, "", "%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	expect := func(want json.Delim, what string) error {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return jsonErr(dec, err)
		}
		if d, ok := tok.(json.Delim); !ok || d != want {
			return fail(off, what, "want %q", string(want))
		}
		return nil
	}
	if err := expect('{', ""); err != nil {
		return nil, err
	}
	set := tokenSet{}
	// grants maps "ROLE\x00ID" to the first entry that grants it: one
	// identity has one grant, so that every per-caller record and limit
	// keyed by it means one set of rights.
	type firstGrant struct {
		line      int
		companies []string
	}
	grants := map[string]firstGrant{}
	seenTokens := false
	for dec.More() {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(dec, err)
		}
		if tok != "tokens" || seenTokens {
			// The field's name is not shown: a file shaped {"TOKEN": {…}}
			// would print the token.
			return nil, fail(off, "", "an unknown or repeated top-level field (the file holds one \"tokens\" list)")
		}
		seenTokens = true
		if err := expect('[', "tokens"); err != nil {
			return nil, err
		}
		for i := 0; dec.More(); i++ {
			off := dec.InputOffset()
			var e tokenEntry
			field := func(f string) string { return fmt.Sprintf("tokens[%d].%s", i, f) }
			if err := dec.Decode(&e); err != nil {
				var te *json.UnmarshalTypeError
				if errors.As(err, &te) {
					return nil, fail(te.Offset, field(te.Field), "want a %s", te.Type)
				}
				return nil, jsonErr(dec, err)
			}
			switch {
			case len(e.Token) < minTokenLen:
				return nil, fail(off, field("token"), "a token of at least %d characters is required", minTokenLen)
			case e.ID == "":
				return nil, fail(off, field("id"), "required")
			case !knownRole(authz.Role(e.Role)):
				return nil, fail(off, field("role"), "%q is no role (instance_admin, local_operator, board_member, agent)", e.Role)
			}
			for j, c := range e.Companies {
				if c == "" {
					return nil, fail(off, field(fmt.Sprintf("companies[%d]", j)), "empty company")
				}
			}
			h := hashToken(e.Token)
			if _, dup := set[h]; dup {
				return nil, fail(off, field("token"), "the same token is listed twice")
			}
			companies := slices.Sorted(slices.Values(e.Companies))
			companies = slices.Compact(companies)
			k := e.Role + "\x00" + e.ID
			if g, ok := grants[k]; ok && !slices.Equal(g.companies, companies) {
				return nil, fmt.Errorf("-tokens %s:%d and %s:%d: role %s id %q is given two different grants (companies %q and %q): give each (role, id) one grant, or another id",
					name, g.line, name, lineAt(data, off), e.Role, e.ID, g.companies, companies)
			} else if !ok {
				grants[k] = firstGrant{line: lineAt(data, off), companies: companies}
			}
			set[h] = authz.Principal{ID: e.ID, Role: authz.Role(e.Role), Companies: companies}
		}
		if err := expect(']', "tokens"); err != nil {
			return nil, err
		}
	}
	if err := expect('}', ""); err != nil {
		return nil, err
	}
	if !seenTokens {
		return nil, fail(0, "tokens", "required")
	}
	return set, nil
}

// tokenIdentity is the identity of the credential whose SHA-256 is
// tokenHash: what a session made from it, idempotency records and stream
// slots are keyed by. It is a hash of the hash, so that the server's
// tables never hold the key the bearer lookup uses.
func tokenIdentity(tokenHash string) string {
	return "token:" + hashToken("berth-server identity\x00" + tokenHash)[:32]
}

// linkIdentity is the identity of a session made from a one-time login
// link of user id.
func linkIdentity(userID string) string { return "link:" + userID }

// tokenSource is the -tokens file as the server reads it: loaded at
// start, read again on SIGHUP (reload) and when its modification time or
// size changes (checked at each lookup), so that a token removed from the
// file dies without a restart. A file that fails to parse on a re-read is
// logged (without its tokens) and the previous set stays in force.
type tokenSource struct {
	path string // "" for a fixed set
	log  func(msg string, args ...any)

	mu         sync.Mutex
	set        tokenSet
	byIdentity map[string]authz.Principal
	mod        time.Time
	size       int64
}

// newTokenSource returns the source of the -tokens file path ("" for no
// file: no bearer tokens).
func newTokenSource(path string, log func(string, ...any)) (*tokenSource, error) {
	ts := &tokenSource{path: path, log: log}
	if path == "" {
		ts.install(tokenSet{})
		return ts, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("-tokens: %w", err)
	}
	set, err := loadTokens(path)
	if err != nil {
		return nil, err
	}
	ts.install(set)
	ts.mod, ts.size = fi.ModTime(), fi.Size()
	return ts, nil
}

// fixedTokens is a source of set that is never read again.
func fixedTokens(set tokenSet) *tokenSource {
	ts := &tokenSource{}
	ts.install(set)
	return ts
}

func (ts *tokenSource) install(set tokenSet) {
	by := make(map[string]authz.Principal, len(set))
	for h, p := range set {
		by[tokenIdentity(h)] = p
	}
	ts.set, ts.byIdentity = set, by
}

// reload reads the file again now.
func (ts *tokenSource) reload() error {
	if ts.path == "" {
		return nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.reloadLocked(true)
}

// reloadLocked reads the file again when forced or when it changed.
func (ts *tokenSource) reloadLocked(force bool) error {
	fi, err := os.Stat(ts.path)
	if err != nil {
		return fmt.Errorf("-tokens: %w (the previous tokens stay in force)", err)
	}
	if !force && fi.ModTime().Equal(ts.mod) && fi.Size() == ts.size {
		return nil
	}
	// Remember the attempt either way: a broken file is reported once per
	// change, not at every request.
	ts.mod, ts.size = fi.ModTime(), fi.Size()
	set, err := loadTokens(ts.path)
	if err != nil {
		return fmt.Errorf("%w (the previous tokens stay in force)", err)
	}
	ts.install(set)
	if ts.log != nil {
		ts.log("tokens file read", "path", ts.path, "tokens", len(set))
	}
	return nil
}

// fresh re-reads a changed file; its error is logged.
func (ts *tokenSource) fresh() {
	if ts.path == "" {
		return
	}
	if err := ts.reloadLocked(false); err != nil && ts.log != nil {
		ts.log("tokens file not read", "error", err.Error())
	}
}

// lookup returns the principal and the credential identity of bearer
// token tok.
func (ts *tokenSource) lookup(tok string) (authz.Principal, string, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.fresh()
	h := hashToken(tok)
	p, ok := ts.set[h]
	if !ok {
		return authz.Principal{}, "", false
	}
	return p, tokenIdentity(h), true
}

// byID returns the current principal of credential identity id.
func (ts *tokenSource) byID(id string) (authz.Principal, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.fresh()
	p, ok := ts.byIdentity[id]
	return p, ok
}

// samePrincipal reports whether a and b are one principal with one grant.
func samePrincipal(a, b authz.Principal) bool {
	return a.ID == b.ID && a.Role == b.Role &&
		slices.Equal(slices.Sorted(slices.Values(a.Companies)), slices.Sorted(slices.Values(b.Companies)))
}
