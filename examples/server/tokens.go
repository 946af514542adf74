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
	"strings"

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
			return fail(off, strings.Trim(msg[i+len("unknown field "):], `"`), "unknown field")
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
	seenTokens := false
	for dec.More() {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(dec, err)
		}
		if tok != "tokens" || seenTokens {
			return nil, fail(off, fmt.Sprint(tok), "unknown or repeated field (the file holds one \"tokens\" list)")
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
			set[h] = authz.Principal{ID: e.ID, Role: authz.Role(e.Role), Companies: e.Companies}
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
